"""Reading rocprofv3 JSON: ``opscope summary FILE --no-cache`` against ``orjson.loads`` of the same file (the raw
parse, nothing mapped), wall time and peak RSS of each as its own child process, medians of ``--repeat`` runs.

Two files: a synthetic 1 GB-class document written here (``--gb``; the record mix of a traced training loop: per
kernel a hipLaunchKernel and its dispatch with the same correlation id, HSA calls, copies with their
hipMemcpyAsync, roctx ranges, allocations; 2,000 kernel symbols) and the real 908_results.json.gz of
../shared/traces (37 MB inflated).

    python bench/ingest_rocv3.py --repeat 3 [--gb 1.0] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpu import run  # one child process: wall seconds, peak RSS (MiB), exit code

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces" / "tracelens" / "rocprof" / "908_results.json.gz"
ORJSON = ("import gzip, sys, orjson; p = sys.argv[1]; data = open(p, 'rb').read(); "
          "orjson.loads(gzip.decompress(data) if data[:2] == b'\\x1f\\x8b' else data)")

_HSA = ["hsa_init", "hsa_signal_store_screlease", "hsa_signal_wait_scacquire", "hsa_queue_load_read_index_relaxed"]
_HIP = ["hipApiNone", "hipLaunchKernel", "hipMemcpyAsync", "hipMalloc", "hipFree", "hipStreamSynchronize"]
_OPS = {1: _HSA, 5: _HIP, 7: ["roctxMarkA", "roctxRangePushA", "roctxRangePop"],
        10: ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE",
             "MEMORY_COPY_DEVICE_TO_HOST", "MEMORY_COPY_DEVICE_TO_DEVICE"],
        11: ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"],
        16: ["MEMORY_ALLOCATION_NONE", "MEMORY_ALLOCATION_ALLOCATE", "MEMORY_ALLOCATION_VMEM_ALLOCATE",
             "MEMORY_ALLOCATION_FREE"]}
_KINDS = {1: "HSA_CORE_API", 5: "HIP_RUNTIME_API", 7: "MARKER_CORE_API", 10: "MEMORY_COPY", 11: "KERNEL_DISPATCH",
          16: "MEMORY_ALLOCATION"}
_SYMBOLS = 2000
_GPU = 9001
_MARKER = 10 ** 12  # correlation ids of the roctx ranges (apart from the launches')


def _header(pid: int, markers: int) -> str:
    agents = [{"size": 312, "id": {"handle": 9000}, "type": 1, "gpu_index": -1, "name": "CPU", "node_id": 0}] + [
        {"size": 312, "id": {"handle": _GPU + i}, "type": 2, "gpu_index": i, "name": "gfx942", "node_id": i + 1,
         "product_name": "AMD Instinct MI300X", "gfx_target_version": 90402, "cu_count": 304,
         "wave_front_size": 64, "mem_banks": [{"size_in_bytes": 206141652992}]} for i in range(8)]
    strings = {"callback_records": [], "buffer_records": [
        {"kind": _KINDS.get(i, "NONE"), "operations": _OPS.get(i, [])} for i in range(33)],
        "marker_api": [{"key": _MARKER + j, "value": f"step {j}"} for j in range(markers)]}
    symbols = [{"size": 88, "kernel_id": k, "code_object_id": 1, "kernel_name": f"_Z6kernel{k}Pfi.kd",
                "formatted_kernel_name": f"void at::native::elementwise_kernel<128, 4, at::native::op_{k}>(int, "
                                         f"at::native::Functor_{k})", "sgpr_count": 32, "arch_vgpr_count": 64}
               for k in range(_SYMBOLS)]
    meta = {"node": {"hostname": "bench"}, "pid": pid, "init_time": 0, "fini_time": 0, "command": ["python"]}
    head = {"metadata": meta, "agents": agents, "counters": [], "strings": strings, "code_objects": [],
            "kernel_symbols": symbols, "host_functions": [], "summary": [], "callback_records": {
                "counter_collection": []}}
    return '{"rocprofiler-sdk-tool":[' + json.dumps(head, separators=(",", ":"))[:-1]


def write_synthetic(path: Path, target_bytes: int) -> dict[str, int]:
    """The document, arrays one after another; returns the record counts. ~650 bytes of records per kernel."""
    n = max(1000, target_bytes // 650)
    t0 = 10_000_000_000
    counts: dict[str, int] = {}
    dispatch = ('{{"size":184,"kind":11,"operation":2,"thread_id":77,"correlation_id":{{"internal":{c},'
                '"external":0}},"start_timestamp":{s},"end_timestamp":{e},"dispatch_info":{{"size":72,"agent_id":'
                '{{"handle":{a}}},"queue_id":{{"handle":16}},"kernel_id":{k},"dispatch_id":{c},'
                '"private_segment_size":0,"group_segment_size":2048,"workgroup_size":{{"x":256,"y":1,"z":1}},'
                '"grid_size":{{"x":{g},"y":1,"z":1}}}},"stream_id":{{"handle":{st}}}}}')
    api = ('{{"size":48,"kind":{kind},"operation":{op},"correlation_id":{{"internal":{c},"external":0}},'
           '"start_timestamp":{s},"end_timestamp":{e},"thread_id":{t}}}')
    copy = ('{{"size":64,"kind":10,"operation":2,"thread_id":77,"correlation_id":{{"internal":{c},"external":0}},'
            '"start_timestamp":{s},"end_timestamp":{e},"dst_agent_id":{{"handle":{a}}},"src_agent_id":'
            '{{"handle":9000}},"bytes":{b},"stream_id":{{"handle":1}}}}')
    with open(path, "w") as fh:
        fh.write(_header(4242, n // 100) + ',"buffer_records":{')

        def array(key: str, rows) -> None:
            fh.write(f'"{key}":[')
            first = True
            count = 0
            for part in _batched(rows, 20000):
                fh.write(("" if first else ",") + ",".join(part))
                first = False
                count += len(part)
            fh.write("]")
            counts[key] = count

        # kernel i: launch at t0 + 5000 i (1500 ns), runs 2000 ns later for 1000 + i % 3000 ns; every 20th is a copy
        array("kernel_dispatch", (dispatch.format(c=2 * i + 1, s=t0 + 5000 * i + 2000,
                                                  e=t0 + 5000 * i + 3000 + i % 3000, a=_GPU + i % 8, k=i % _SYMBOLS,
                                                  g=256 * (1 + i % 64), st=i % 4)
                                  for i in range(n) if i % 20))
        fh.write(",")
        array("hip_api", (api.format(kind=5, op=1 if i % 20 else 2, c=2 * i + 1, s=t0 + 5000 * i,
                                     e=t0 + 5000 * i + 1500, t=77) for i in range(n)))
        fh.write(",")
        array("hsa_api", (api.format(kind=1, op=1 + i % 3, c=2 * i + 2, s=t0 + 5000 * i + 200, e=t0 + 5000 * i + 400,
                                     t=77) for i in range(0, n, 4)))
        fh.write(",")
        array("marker_api", (api.format(kind=7, op=1, c=_MARKER + j, s=t0 + 500_000 * j, e=t0 + 500_000 * j + 499_000,
                                        t=77) for j in range(n // 100)))
        fh.write(',"rccl_api":[],')
        array("memory_copy", (copy.format(c=2 * i + 1, s=t0 + 5000 * i + 2000, e=t0 + 5000 * i + 2800, a=_GPU + i % 8,
                                          b=4096 * (1 + i % 100)) for i in range(0, n, 20)))
        fh.write(",")
        array("memory_allocation", ('{{"size":64,"kind":16,"operation":{op},"thread_id":77,"correlation_id":'
                                    '{{"internal":{c},"external":0}},"start_timestamp":{s},"end_timestamp":{s},'
                                    '"agent_id":{{"handle":{a}}},"address":"0x{addr:016x}","allocation_size":{b}}}'
                                    .format(op=1 if j % 2 == 0 else 3, c=2 * 10 ** 12 + j, s=t0 + 50_000 * j,
                                            a=_GPU, addr=0x7F0000000000 + 4096 * (j // 2), b=1 << 20)
                                    for j in range(n // 1000 * 2)))
        fh.write(',"scratch_memory":[],"pc_sample_host_trap":[],"pc_sample_stochastic":[]}}]}')
    return counts


def _batched(rows, size: int):
    part = []
    for r in rows:
        part.append(r)
        if len(part) == size:
            yield part
            part = []
    if part:
        yield part


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--keep", type=Path, help="write the synthetic file here (and reuse it if it exists)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="opscope-rocv3-bench-"))
    synthetic = args.keep or tmp / "synthetic_results.json"
    if not synthetic.exists():
        t = time.perf_counter()
        counts = write_synthetic(synthetic, int(args.gb * 1e9))
        print(f"wrote {synthetic} ({synthetic.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t:.1f} s: "
              f"{counts}", file=sys.stderr)
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT / "src")}
    rows = []
    for trace in (synthetic, REAL):
        if not trace.exists():
            print(f"skipped {trace} (absent)", file=sys.stderr)
            continue
        cases = {"orjson.loads": [sys.executable, "-c", ORJSON, str(trace)],
                 "opscope summary --no-cache": [sys.executable, "-m", "opscope.cli", "summary", str(trace),
                                                "--no-cache"]}
        for name, cmd in cases.items():
            runs = []
            for _ in range(args.repeat):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                r = run(cmd, env)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                r["cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
                runs.append(r)
            failed = [r for r in runs if r["rc"]]
            if failed:
                raise SystemExit(f"failed: {' '.join(cmd)}: {failed[0]['stderr_tail']}")
            med = {key: statistics.median(r[key] for r in runs) for key in ("wall_s", "cpu_s", "peak_rss_mb")}
            rows.append((trace.name, trace.stat().st_size, name, med["wall_s"], med["cpu_s"], med["peak_rss_mb"]))
    print(f"median of {args.repeat}; {os.cpu_count()} CPUs\n")
    print("| file | size MB | case | wall s | CPU s | peak RSS MiB |")
    print("|---|---:|---|---:|---:|---:|")
    for name, size, case, wall, cpu, rss in rows:
        print(f"| {name} | {size / 1e6:,.1f} | {case} | {wall:.2f} | {cpu:.2f} | {rss:,.0f} |")


if __name__ == "__main__":
    main()
