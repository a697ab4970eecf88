"""Reading an Nsight Systems SQLite export: ``opscope summary FILE --no-cache`` against the raw read with sqlite3
(``SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL`` fetchall, and the kernel + runtime tables fetchall), wall time and
peak RSS of each as its own process, medians of ``--repeat`` runs; on a synthetic 1 GB-class export written here
(nsys 2024.5's kernel/runtime/memcpy/NVTX columns, ``executemany``) and on the biggest real export at hand.

    python bench/ingest_nsys.py --repeat 3                 # ~1 GB synthetic + the real file
    python bench/ingest_nsys.py --kernels 200000 --repeat 1  # a quick look
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from gpu import median_wall_and_rss  # child processes: median wall seconds, largest peak RSS (MiB)

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces" / "nsys" / "perlmutter-cloverleaf-cuda.sqlite"
COMMITTED = ROOT / "tests" / "data" / "nsys" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite.gz"
FETCH = ("import sqlite3, sys\ncon = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)\n"
         "for t in sys.argv[2:]:\n    rows = con.execute('SELECT * FROM ' + t).fetchall()\n")

KERNEL_COLS = ["start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid",
               "demangledName", "shortName", "mangledName", "launchType", "cacheConfig", "registersPerThread", "gridX",
               "gridY", "gridZ", "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory",
               "localMemoryPerThread", "localMemoryTotal", "gridId", "sharedMemoryExecuted", "graphNodeId",
               "sharedMemoryLimitConfig"]
RUNTIME_COLS = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue", "callchainId"]
MEMCPY_COLS = ["start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid",
               "bytes", "copyKind", "deprecatedSrcId", "srcKind", "dstKind", "srcDeviceId", "dstDeviceId",
               "migrationCause", "graphNodeId", "virtualAddress"]
NVTX_COLS = ["start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "endGlobalTid",
             "textId", "domainId", "jsonTextId", "jsonText"]


def synthetic(path: Path, kernels: int, seed: int = 0) -> None:
    """A training-loop-like export: per step 1,000 kernels on 4 streams of device 0, each launched by a
    cudaLaunchKernel_v7000 runtime row on one thread (correlation ids 1..N), one HtoD copy per 50 kernels, an NVTX
    ``step N`` range per step; 2,000 distinct kernel names of ~120 characters in StringIds."""
    rnd = random.Random(seed)
    pid, tid = 4242, 4243
    gpid, gtid = pid << 24, (pid << 24) | tid
    names = [f"void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<op_{i}>(at::TensorIteratorBase&)"
             f"::lambda_{i}>(int, op_{i})" for i in range(2000)]
    strings = [(1, "cudaLaunchKernel_v7000"), (2, "cudaMemcpyAsync_v3020"), (3, "main")]
    strings += [(10 + i, n) for i, n in enumerate(names)]
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    for table, cols in (("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_COLS), ("CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME_COLS),
                        ("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_COLS), ("NVTX_EVENTS", NVTX_COLS)):
        con.execute(f"CREATE TABLE {table} ({', '.join(cols)})")
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("CREATE TABLE ThreadNames (nameId, priority, globalTid)")
    con.execute("CREATE TABLE TARGET_INFO_GPU (id, name, totalMemory, computeMajor, computeMinor, smCount)")
    con.execute("CREATE TABLE META_DATA_EXPORT (name, value)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)
    con.execute("INSERT INTO ThreadNames VALUES (3, 10, ?)", (gtid,))
    con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', 85520809984, 9, 0, 132)")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', 'synthetic (bench/ingest_nsys.py)')")
    durations = [rnd.randrange(2_000, 200_000) for _ in range(4096)]

    def rows():
        t = 1_000_000
        for i in range(kernels):
            launch = t
            t += 6_000
            d = durations[i & 4095]
            n = 10 + (i * 7919) % len(names)
            yield ((launch + 4_000, launch + 4_000 + d, 0, 1, None, 7 + (i & 3), i + 1, gpid, n, n, n, 1, 0, 32,
                    256, 1, 1, 128, 1, 1, 0, 4096, 0, 0, i, 8192, None, None),
                   (launch, launch + 3_000, 0, gtid, i + 1, 1, 0, None))

    kernel_sql = f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(KERNEL_COLS))})"
    runtime_sql = f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({', '.join('?' * len(RUNTIME_COLS))})"
    batch_k: list[tuple] = []
    batch_r: list[tuple] = []
    for k, r in rows():
        batch_k.append(k)
        batch_r.append(r)
        if len(batch_k) == 200_000:
            con.executemany(kernel_sql, batch_k)
            con.executemany(runtime_sql, batch_r)
            batch_k, batch_r = [], []
    con.executemany(kernel_sql, batch_k)
    con.executemany(runtime_sql, batch_r)
    copies = [(1_000_000 + i * 6_000 * 50 + 5_000, 1_000_000 + i * 6_000 * 50 + 9_000, 0, 1, None, 7,
               kernels + i + 1, gpid, 1 << 20, 1, None, 0, 2, 0, 0, None, None, None) for i in range(kernels // 50)]
    con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({', '.join('?' * len(MEMCPY_COLS))})", copies)
    con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({', '.join('?' * len(RUNTIME_COLS))})",
                    [(c[0] - 4_000, c[0] - 1_000, 0, gtid, c[6], 2, 0, None) for c in copies])
    steps = [(1_000_000 + s * 6_000_000 - 100, 1_000_000 + (s + 1) * 6_000_000 - 200, 59, None, None, None,
              f"step {s}", gtid, None, None, 0, None, None) for s in range(max(1, kernels // 1000))]
    con.executemany(f"INSERT INTO NVTX_EVENTS VALUES ({', '.join('?' * len(NVTX_COLS))})", steps)
    con.commit()
    con.close()


def measure(path: Path, repeat: int, env: dict[str, str]) -> list[tuple[str, float, int]]:
    cases = {
        "sqlite3 fetchall, SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL":
            [sys.executable, "-c", FETCH, str(path), "CUPTI_ACTIVITY_KIND_KERNEL"],
        "sqlite3 fetchall, kernel + runtime tables":
            [sys.executable, "-c", FETCH, str(path), "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"],
        "opscope summary --no-cache": [sys.executable, "-m", "opscope.cli", "summary", str(path), "--no-cache"],
    }
    out = []
    for name, cmd in cases.items():
        out.append((name, *median_wall_and_rss(cmd, repeat, env)))
    return out


def table(path: Path, results: list[tuple[str, float, int]]) -> str:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    kernels = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    runtime = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    con.close()
    base = results[0][1]
    lines = [f"{path.name}: {path.stat().st_size / 1e6:,.1f} MB, {kernels:,} kernels, {runtime:,} runtime rows", "",
             "| case | wall s | x kernel fetchall | peak RSS MiB |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {wall:.2f} | {wall / base:.2f} | {rss} |" for name, wall, rss in results]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kernels", type=int, default=6_000_000, help="kernels (and launches) in the synthetic export")
    ap.add_argument("--real", type=Path, default=REAL)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="opscope-nsys-bench-"))
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(tmp / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    try:
        real = args.real
        if not real.exists():
            real = tmp / "saxpy.sqlite"
            with gzip.open(COMMITTED, "rb") as src, open(real, "wb") as dst:
                shutil.copyfileobj(src, dst)
        print(table(real, measure(real, args.repeat, env)), "\n")
        synth = tmp / "synthetic.sqlite"
        t0 = time.perf_counter()
        synthetic(synth, args.kernels)
        print(f"(synthetic export written in {time.perf_counter() - t0:.1f} s)")
        print(table(synth, measure(synth, args.repeat, env)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
