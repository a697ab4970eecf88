"""Reading rocprof CSVs: ``opscope summary --no-cache`` on a synthetic rocprofv3 ``kernel_trace.csv`` (the CSV kind
that grows with the run: one row per dispatch) against the raw parse with Python's csv module (every row split, in
one child), and on the largest real rocprof CSV in ../shared. Wall time and peak RSS of each child, medians of
``--repeat`` runs.

    python bench/ingest_rocprof.py --mb 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

from gpu import wall_and_rss as run  # one child process: wall seconds and peak RSS (MiB)

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces" / "rocprofiler-compute" / "vcopy" / "MI300X_A1" / "pmc_perf.csv"
HEADER = ('"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
          '"Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count",'
          '"Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X",'
          '"Grid_Size_Y","Grid_Size_Z"\n')
KERNELS = ["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
           "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
           "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1_ABV0",
           "void rocprim::detail::block_reduce_kernel<false, rocprim::default_config, float*>(float*, unsigned int)",
           "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "__amd_rocclr_copyBuffer"]
RAW_CSV = "import csv, sys\nn = 0\nfor row in csv.reader(open(sys.argv[1], newline='')):\n    n += len(row)\nprint(n)"


def write_kernel_trace(path: Path, megabytes: int) -> int:
    """A rocprofv3 kernel_trace.csv of about ``megabytes`` MB (written in blocks); the number of rows."""
    rng = random.Random(17)
    target = megabytes * 1_000_000
    t = 1_000_000_000_000
    rows = 0
    written = 0
    with open(path, "w") as fh:
        fh.write(HEADER)
        while written < target:
            lines = []
            for _ in range(20_000):
                k = rng.randrange(len(KERNELS))
                dur = rng.randrange(2_000, 400_000)
                rows += 1
                lines.append(f'"KERNEL_DISPATCH","Agent 4",1,{k % 3},4242,{rows},{k},"{KERNELS[k]}",{rows},{t},'
                             f"{t + dur},0,0,12,4,48,256,1,1,{rng.randrange(1, 1 << 20)},1,1\n")
                t += dur + rng.randrange(100, 5_000)
            block = "".join(lines)
            fh.write(block)
            written += len(block)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mb", type=int, default=1000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="opscope-rocprof-bench-"))
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(tmp / "cache")}
    synthetic = tmp / "4242_kernel_trace.csv"
    rows = write_kernel_trace(synthetic, args.mb)
    files = [(synthetic, f"synthetic rocprofv3 kernel_trace.csv, {rows:,} dispatches")]
    if REAL.exists():
        files.append((REAL, "real rocprof-compute MI300X pmc_perf.csv (3 dispatches x 2,700 columns)"))
    print(f"median of {args.repeat} runs each\n")
    print("| file | MB | case | wall s | x csv | peak RSS MiB |")
    print("|---|---:|---|---:|---:|---:|")
    for path, label in files:
        cases = {"csv.reader, every row": [sys.executable, "-c", RAW_CSV, str(path)],
                 "opscope summary --no-cache": [sys.executable, "-m", "opscope.cli", "summary", str(path),
                                                "--no-cache"]}
        results = {}
        for name, cmd in cases.items():
            runs = [run(cmd, env) for _ in range(args.repeat)]
            results[name] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
        base = results["csv.reader, every row"][0]
        for name, (wall, rss) in results.items():
            print(f"| {label} | {path.stat().st_size / 1e6:.1f} | {name} | {wall:.2f} | {wall / base:.2f} | {rss} |")
    synthetic.unlink()


if __name__ == "__main__":
    main()
