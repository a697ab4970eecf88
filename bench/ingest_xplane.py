"""Reading XProf XSpace files: ``opscope summary FILE --no-cache`` against protobuf's bare ``ParseFromString`` of the
same file (the XSpace message class opscope builds), wall time and peak RSS of each child process, medians.

Cases: a synthetic 1 GB-class xplane written in a temp dir (a TF-like host plane: ops, launches with correlation
ids, thread-pool regions; a GPU plane: kernels and copies on 4 streams with the XProf ``TensorFlow Ops`` line that
repeats them), and the largest real one (../shared/traces/tf-profiler/GPU-multi-worker/34.83.195.179_6003.xplane.pb).

The synthetic file is made fast: one block of events per line kind is built and serialised once, and every line is
a small header (its id, name and own start time) followed by that block: concatenated protobuf messages of one type
merge, so each line holds the block's events at its own time.

    python bench/ingest_xplane.py --repeat 3 --size-mb 1000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu import median_wall_and_rss  # child processes: median wall seconds, largest peak RSS (MiB)

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces" / "tf-profiler" / "GPU-multi-worker" / "34.83.195.179_6003.xplane.pb"
PARSE = ("import sys; sys.path.insert(0, sys.argv[2]); from opscope.ingest.xplane.schema import classes; "
         "s = classes()['XSpace'](); s.ParseFromString(open(sys.argv[1], 'rb').read()); "
         "print(sum(len(ln.events) for p in s.planes for ln in p.lines))")
BLOCK_EVENTS = 20_000


def synthetic(path: Path, size_mb: int) -> int:
    """Write an XSpace of about ``size_mb`` MB; returns its number of events."""
    sys.path.insert(0, str(ROOT / "src"))
    from opscope.ingest.xplane.schema import classes

    c = classes()
    host_meta, host_block = _host_block(c)
    dev_meta, dev_block, derived_block = _device_block(c)
    line_span_ns = BLOCK_EVENTS * 10_000  # each block spans 200 ms; lines follow one another in time
    host_lines: list[bytes] = []
    dev_lines: list[bytes] = []
    total = 0
    size = 0
    i = 0
    while size < size_mb * 1_000_000:
        ts = i * line_span_ns
        host_lines.append(c["XLine"](id=1000 + i % 16, name=f"tf_Compute/{1000 + i % 16}", timestamp_ns=ts)
                          .SerializeToString() + host_block)
        dev_lines.extend(c["XLine"](id=10 + s, name=f"Stream #{10 + s}(Compute)", timestamp_ns=ts)
                         .SerializeToString() + dev_block for s in range(4))
        dev_lines.append(c["XLine"](id=-559038734, name="TensorFlow Ops", timestamp_ns=ts).SerializeToString()
                         + derived_block)
        size += len(host_lines[-1]) + sum(len(b) for b in dev_lines[-5:])
        total += BLOCK_EVENTS + 4 * (BLOCK_EVENTS // 2)
        i += 1
    host = c["LazyPlane"](name="/host:CPU", lines=host_lines)
    _merge_meta(host, host_meta)
    dev = c["LazyPlane"](id=0, name="/device:GPU:0", lines=dev_lines)
    _merge_meta(dev, dev_meta)
    space = c["LazySpace"](planes=[host.SerializeToString(), dev.SerializeToString()], hostnames=["bench"])
    path.write_bytes(space.SerializeToString())
    return total


def _merge_meta(lazy, plane) -> None:
    for k, v in plane.event_metadata.items():
        lazy.event_metadata[k].CopyFrom(v)
    for k, v in plane.stat_metadata.items():
        lazy.stat_metadata[k].CopyFrom(v)


def _host_block(c) -> tuple:
    """Host events: an op (``scope/node:Type``) with a launch inside it, alternately."""
    plane = c["XPlane"]()
    for mid, (name, display) in enumerate([(f"model/dense_{k}/MatMul:MatMul", "MatMul") for k in range(8)]
                                          + [("cudaLaunchKernel", ""), ("ExecutorState::Process", "")], start=1):
        plane.event_metadata[mid].id, plane.event_metadata[mid].name = mid, name
        plane.event_metadata[mid].display_name = display
    for sid, name in enumerate(("correlation_id", "shape"), start=1):
        plane.stat_metadata[sid].id, plane.stat_metadata[sid].name = sid, name
    line = c["XLine"]()
    for k in range(BLOCK_EVENTS // 2):
        op = line.events.add(metadata_id=1 + k % 8, offset_ps=k * 20_000_000, duration_ps=15_000_000)
        op.stats.add(metadata_id=2, str_value="(float[64,128];float[128,256])")
        launch = line.events.add(metadata_id=9, offset_ps=k * 20_000_000 + 5_000_000, duration_ps=4_000_000)
        launch.stats.add(metadata_id=1, uint64_value=k)
    return plane, line.SerializeToString()[len(c["XLine"]().SerializeToString()):]


def _device_block(c) -> tuple:
    """Kernels with their correlation id and kernel details; the derived TF Ops line repeats them."""
    plane = c["XPlane"]()
    for mid, name in enumerate([f"void gemm_kernel<{k}>(float*, float const*)" for k in range(8)], start=1):
        plane.event_metadata[mid].id, plane.event_metadata[mid].name = mid, name
    plane.event_metadata[9].id, plane.event_metadata[9].name = 9, "model/dense/MatMul"
    plane.event_metadata[9].display_name = "MatMul"
    for sid, name in enumerate(("correlation_id", "kernel_details", "regs:32 grid:128,1,1 block:256,1,1"), start=1):
        plane.stat_metadata[sid].id, plane.stat_metadata[sid].name = sid, name
    line, derived = c["XLine"](), c["XLine"]()
    for k in range(BLOCK_EVENTS // 2):
        ev = line.events.add(metadata_id=1 + k % 8, offset_ps=k * 20_000_000 + 10_000_000, duration_ps=9_000_000)
        ev.stats.add(metadata_id=1, uint64_value=k)
        ev.stats.add(metadata_id=2, ref_value=3)
        derived.events.add(metadata_id=9, offset_ps=k * 20_000_000 + 10_000_000, duration_ps=9_000_000)
    return plane, line.SerializeToString(), derived.SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=1000)
    ap.add_argument("--write", type=Path, help="only write the synthetic file there and print its event count")
    args = ap.parse_args()
    if args.write:
        print(synthetic(args.write, args.size_mb))
        return
    tmp = Path(tempfile.mkdtemp(prefix="opscope-xplane-bench-"))
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT / "src")}
    big = tmp / "synthetic.xplane.pb"
    # written by a child: a parent holding the file's GBs would pass its peak RSS on to the children it forks
    made = subprocess.run([sys.executable, __file__, "--write", str(big), "--size-mb", str(args.size_mb)],
                          check=True, capture_output=True, text=True)
    events = int(made.stdout.split()[-1])
    files = [("synthetic", big, events)]
    if REAL.exists():
        files.append(("real (TF GPU, 8x V100 host)", REAL, 23_128))
    print(f"median of {args.repeat}\n")
    print("| file | MB | events | case | wall s | x parse | peak RSS MiB |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for label, path, n in files:
        cases = {"protobuf ParseFromString": [sys.executable, "-c", PARSE, str(path), str(ROOT / "src")],
                 "opscope summary --no-cache": [sys.executable, "-m", "opscope.cli", "summary", str(path),
                                                "--no-cache"]}
        results = {}
        for name, cmd in cases.items():
            results[name] = median_wall_and_rss(cmd, args.repeat, env)
        base = results["protobuf ParseFromString"][0]
        for name, (wall, rss) in results.items():
            print(f"| {label} | {path.stat().st_size / 1e6:,.1f} | {n:,} | {name} | {wall:.2f} | {wall / base:.2f} "
                  f"| {rss:,} |")
    big.unlink()


if __name__ == "__main__":
    main()
