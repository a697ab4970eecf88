"""Findings whose remedy maps to a what-if change carry the saving the replay predicts, and the change that gives it;
the others say they are estimated and why."""

from __future__ import annotations

from support import make_trace, row

from opscope.advise import advise
from opscope.analyses.whatif import parse_change, whatif_table


def _step():
    # the host launches gemm (10-14), waits for it in cudaDeviceSynchronize (30-90; gemm runs 16-85), then 10 more;
    # removing the wait leaves 0-30 and the last 10: the step would take 40 instead of 100 (60 saved)
    return make_trace([
        row("user_annotation", "ProfilerStep#1", 0, 100),
        row("cpu_op", "aten::mm", 5, 15),
        row("runtime", "cudaLaunchKernel", 10, 4, correlation=1),
        row("cpu_op", "aten::item", 29, 62),
        row("runtime", "cudaDeviceSynchronize", 30, 60),
        row("kernel", "gemm", 16, 69, correlation=1, pid=0, tid=7, stream=7, device=0),
    ])


def test_the_sync_finding_is_simulated_and_whatif_gives_the_same_saving():
    trace = _step()
    finding = advise(trace, only=["host-sync"]).findings[0]
    assert (finding.change, finding.saving_method) == ("sync=0", "simulated")
    assert finding.saving_ns == 60_000 and finding.saving_pct == 60.0
    assert finding.estimated_ns is not None and "the rule's own arithmetic" in finding.estimate
    table, _ = whatif_table(trace, [parse_change(finding.change)])
    saved = [r - p for r, p in zip(table["replayed_ns"].to_pylist(), table["predicted_ns"].to_pylist())]
    assert sum(saved) / len(saved) == finding.saving_ns


def test_findings_that_cannot_be_simulated_say_why():
    trace = _step()
    for finding in advise(trace).findings:
        if finding.saving_method != "simulated" and finding.saving_ns is not None:
            assert "not simulated" in finding.estimate and finding.change is None
