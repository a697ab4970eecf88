"""vLLM's graph-capture trace against its execution trace (TraceLens' vllm_decode_full pair, MI300): the replayed
kernels get the ops the capture recorded, checked against the raw JSON of both files."""

from __future__ import annotations

import difflib
import json

from support.cli import run_cli_many
from support.shared import raw_events, shared_trace

from opscope.analyses.graph_capture import captured_graphs, match_replays
from opscope.analyses.kernels import NO_LAUNCHING_OP
from opscope.ingest import open_trace

FOLDER = "tracelens/traces/inference/vllm_decode_full"
CAPTURE = f"{FOLDER}/capture_traces/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz"


def _innermost_op(ops: list[dict], launch: dict) -> str | None:
    """The shortest cpu_op of the launch's thread whose span holds the launch's start (the raw JSON's nesting)."""
    around = [o for o in ops if o["tid"] == launch["tid"] and o["ts"] <= launch["ts"] < o["ts"] + o["dur"]]
    return min(around, key=lambda o: o["dur"])["name"] if around else None


def test_the_vllm_replay_gets_the_ops_of_its_capture(tmp_path, monkeypatch):
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(tmp_path))
    capture_path, execution_path = shared_trace(CAPTURE), shared_trace(f"{FOLDER}/graph_execution.json.gz")
    match = match_replays(open_trace(execution_path), captured_graphs(open_trace(capture_path)))

    # expected, from the raw files: the kernels that share the graph launch's correlation id, in time order, and
    # the capture's kernel launches inside its capture annotation, in time order, matched by name order
    ex = raw_events(execution_path)
    graph_launch = next(e for e in ex if e.get("name") == "hipGraphLaunch")
    replayed = sorted((e for e in ex if e.get("cat") == "kernel"
                       and e["args"].get("correlation") == graph_launch["args"]["correlation"]), key=lambda e: e["ts"])
    cap = raw_events(capture_path)
    window = next(e for e in cap if e.get("cat") == "user_annotation" and e["name"].startswith("capture_"))
    launches = sorted((e for e in cap if e.get("cat") == "cuda_runtime" and "kernel" in e.get("args", {})
                       and window["ts"] <= e["ts"] < window["ts"] + window["dur"]), key=lambda e: e["ts"])
    matcher = difflib.SequenceMatcher(a=[e["name"] for e in replayed], b=[e["args"]["kernel"] for e in launches],
                                      autojunk=False)
    pairs = [(block.a + k, block.b + k) for block in matcher.get_matching_blocks() for k in range(block.size)]

    assert (match.replays, match.replayed_kernels) == (1, len(replayed)) and len(replayed) > 400
    assert match.matched_kernels == len(pairs)
    total_us = sum(e["dur"] for e in ex if e.get("cat") == "kernel")
    matched_us = sum(replayed[a]["dur"] for a, _ in pairs)
    assert match.matched_ns == round(matched_us * 1000)
    assert matched_us / total_us >= 0.9  # the device time that now has its op

    # each matched kernel's op is the innermost cpu_op around its launch at capture
    ops = [e for e in cap if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    got = {row["device_row"]: row["op_name"] for row in match.attribution.to_pylist()}
    names = open_trace(execution_path).select(["name", "ts_ns"])
    by_start = {(n, t): r for r, (n, t) in enumerate(zip(names["name"].to_pylist(), names["ts_ns"].to_pylist()))}
    for a, b in pairs[::20]:  # every 20th: the brute-force nesting is quadratic
        kernel = replayed[a]
        row = by_start[(kernel["name"], round(kernel["ts"] * 1000))]
        assert got[row] == _innermost_op(ops, launches[b])


def test_commands_use_the_capture_beside_the_trace(tmp_path):
    execution_path = shared_trace(f"{FOLDER}/graph_execution.json.gz")
    merged, plain, ops = run_cli_many([
        ("kernels", str(execution_path), "--by-op", "-f", "json"),
        ("kernels", str(execution_path), "--by-op", "-f", "json", "--capture", "none"),
        ("ops", str(execution_path), "--gpu", "-f", "json")], cache=tmp_path)
    for res in (merged, plain, ops):
        assert res.returncode == 0, res.stderr
    assert "found beside the trace" in merged.stderr and "graph capture" not in plain.stderr

    # expected from the raw execution trace: all kernel time, and the replayed kernels' (the graph launch's id)
    ex = raw_events(execution_path)
    kernels = [e for e in ex if e.get("cat") == "kernel"]
    graph_ids = {e["args"]["correlation"] for e in ex if e.get("name") == "hipGraphLaunch"}
    total_ns = sum(round(e["dur"] * 1000) for e in kernels)
    replayed_ns = sum(round(e["dur"] * 1000) for e in kernels if e["args"].get("correlation") in graph_ids)

    def with_op_ns(res) -> int:
        rows = json.loads(res.stdout)
        assert sum(r["total_ns"] for r in rows if r["kind"] == "kernel") == total_ns
        return sum(r["total_ns"] for r in rows if r["kind"] == "kernel" and r["op"] != NO_LAUNCHING_OP)

    # every replayed kernel matched (test above), so merged, the ops cover the replayed time too
    assert with_op_ns(merged) - with_op_ns(plain) == replayed_ns
    assert with_op_ns(merged) / total_ns >= 0.9 > with_op_ns(plain) / total_ns
    # the capture's ops appear with device time and no host call in this trace
    rows = {r["name"]: r for r in json.loads(ops.stdout)}
    assert rows["vllm::moe_forward"]["calls"] == 0 and rows["vllm::moe_forward"]["gpu_ns"] > 0
