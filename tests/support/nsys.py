"""Nsight Systems SQLite exports BUILT in the tests from the documented schema (not recorded by nsys).

The tables and columns are those of nsys 2024.5's export (schema 3.13, as measured in
docs/surveys/formats.md §5), cut to the columns the reader uses plus a few it must ignore; a test
chooses which tables exist and what rows they hold.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "nsys"
SAXPY_GZ = DATA / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite.gz"

COLUMNS: dict[str, list[str]] = {
    "StringIds": ["id", "value"],
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        "start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid",
        "demangledName", "shortName", "mangledName", "launchType", "registersPerThread", "gridX", "gridY", "gridZ",
        "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory", "localMemoryTotal", "gridId"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "eventClass", "globalTid", "correlationId", "nameId",
                                    "returnValue", "callchainId"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                                   "bytes", "copyKind", "deprecatedSrcId", "srcKind", "dstKind", "srcDeviceId",
                                   "dstDeviceId", "migrationCause", "graphNodeId"],
    "CUPTI_ACTIVITY_KIND_MEMSET": ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                                   "value", "bytes", "memKind", "graphNodeId"],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ["start", "end", "deviceId", "contextId", "streamId", "correlationId",
                                            "globalPid", "syncType", "eventId"],
    "NVTX_EVENTS": ["start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "endGlobalTid",
                    "textId", "domainId", "jsonText"],
    "ThreadNames": ["nameId", "priority", "globalTid"],
    "TARGET_INFO_GPU": ["vmId", "id", "name", "busLocation", "totalMemory", "clockRate", "smCount", "uuid",
                        "computeMajor", "computeMinor", "maxThreadsPerBlock", "threadsPerWarp", "maxWarpsPerSm",
                        "maxRegistersPerBlock", "maxShmemPerBlock"],
    "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs", "utcTime", "localTime"],
    "META_DATA_EXPORT": ["name", "value"],
    "PROCESSES": ["globalPid", "pid", "name"],
    "OSRT_API": ["start", "end", "eventClass", "globalTid", "nameId", "returnValue"],
}


def gtid(pid: int, tid: int) -> int:
    """nsys's globalTid: the process id in bits 24-47, the thread id below."""
    return (pid << 24) | tid


def gpid(pid: int) -> int:
    return pid << 24


def build_export(path: Path, tables: dict[str, list[dict[str, Any]]]) -> Path:
    """An SQLite file with ``tables`` (name -> rows as dicts; columns not given are NULL); an empty list makes the
    table without rows. The file is written with ``executemany``, one transaction."""
    con = sqlite3.connect(path)
    try:
        for name, rows in tables.items():
            cols = COLUMNS.get(name) or sorted({k for r in rows for k in r})
            con.execute(f"CREATE TABLE {name} ({', '.join(cols)})")
            con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})",
                            [[r.get(c) for c in cols] for r in rows])
        con.commit()
    finally:
        con.close()
    return path


PID, TID = 100, 101
G = gtid(PID, TID)
#: StringIds of the built export.
STRINGS = {1: "cudaLaunchKernel_v7000", 2: "cudaMemcpyAsync_v3020", 3: "void gemm<float>(float *, int)", 4: "gemm",
           5: "cudaStreamSynchronize_v3020", 6: "main thread", 8: "step 2", 9: "relu_kernel", 10: "fopen"}


def small_export_tables() -> dict[str, list[dict[str, Any]]]:
    """A two-step training loop on one thread of process 100, by hand (times in ns):

    step 1 (NVTX push/pop "step 1", inline text, 900-4000): cudaLaunchKernel (1000-1100, corr 1) -> gemm kernel
    1150-2150; cudaMemcpyAsync (1200-1300, corr 2) -> HtoD pageable->device memcpy 2200-2500 (4096 B);
    cudaLaunchKernel (1400-1500, corr 3) -> relu_kernel 2600-3100; cudaStreamSynchronize 1600-3200 (corr 4);
    a CUDA backtrace row (eventClass 67) 990-1110 around the first launch (must be skipped).
    step 2 (NVTX "step 2" by textId, 4900-7000): cudaLaunchKernel 5000-5100 (corr 5) -> gemm 5150-6150.
    A mark at 950, the thread named "trainer" by NVTX and "main thread" by ThreadNames; one GPU; no MEMSET
    table and no SYNCHRONIZATION table; 3 OSRT_API rows (not read: warned).
    """
    kernel = {"deviceId": 0, "contextId": 1, "streamId": 7, "globalPid": gpid(PID), "launchType": 0}
    gemm = {**kernel, "demangledName": 3, "shortName": 4, "gridX": 64, "gridY": 2, "gridZ": 1, "blockX": 256,
            "blockY": 1, "blockZ": 1, "registersPerThread": 32, "staticSharedMemory": 1024,
            "dynamicSharedMemory": 2048}
    return {
        "StringIds": [{"id": i, "value": v} for i, v in STRINGS.items()],
        "CUPTI_ACTIVITY_KIND_RUNTIME": [
            {"start": 990, "end": 1110, "eventClass": 67, "globalTid": G, "correlationId": 1, "nameId": 1},
            {"start": 1000, "end": 1100, "eventClass": 0, "globalTid": G, "correlationId": 1, "nameId": 1},
            {"start": 1200, "end": 1300, "eventClass": 0, "globalTid": G, "correlationId": 2, "nameId": 2},
            {"start": 1400, "end": 1500, "eventClass": 0, "globalTid": G, "correlationId": 3, "nameId": 1},
            {"start": 1600, "end": 3200, "eventClass": 0, "globalTid": G, "correlationId": 4, "nameId": 5},
            {"start": 5000, "end": 5100, "eventClass": 0, "globalTid": G, "correlationId": 5, "nameId": 1},
        ],
        "CUPTI_ACTIVITY_KIND_KERNEL": [
            {**gemm, "start": 1150, "end": 2150, "correlationId": 1},
            {**kernel, "start": 2600, "end": 3100, "correlationId": 3, "demangledName": 9, "shortName": 9,
             "gridX": 1, "gridY": 1, "gridZ": 1, "blockX": 32, "blockY": 1, "blockZ": 1},
            {**gemm, "start": 5150, "end": 6150, "correlationId": 5},
        ],
        "CUPTI_ACTIVITY_KIND_MEMCPY": [
            {"start": 2200, "end": 2500, "deviceId": 0, "contextId": 1, "streamId": 7, "correlationId": 2,
             "globalPid": gpid(PID), "bytes": 4096, "copyKind": 1, "srcKind": 0, "dstKind": 2},
        ],
        "NVTX_EVENTS": [
            {"start": 10, "end": None, "eventType": 75, "text": "app", "globalTid": G, "domainId": 1},
            {"start": 20, "end": None, "eventType": 39, "text": "trainer", "globalTid": G, "domainId": 0},
            {"start": 900, "end": 4000, "eventType": 59, "text": "step 1", "globalTid": G, "domainId": 0},
            {"start": 950, "end": None, "eventType": 34, "text": "checkpoint", "globalTid": G, "domainId": 0},
            {"start": 4900, "end": 7000, "eventType": 59, "textId": 8, "globalTid": G, "domainId": 0},
        ],
        "ThreadNames": [{"nameId": 6, "priority": 10, "globalTid": G}],
        "TARGET_INFO_GPU": [{"vmId": 0, "id": 0, "name": "NVIDIA Test GPU", "totalMemory": 8_000_000_000,
                             "smCount": 10, "computeMajor": 8, "computeMinor": 6, "maxThreadsPerBlock": 1024,
                             "threadsPerWarp": 32, "maxWarpsPerSm": 48, "maxRegistersPerBlock": 65536,
                             "maxShmemPerBlock": 49152}],
        "TARGET_INFO_SESSION_START_TIME": [{"utcEpochNs": 1_700_000_000_000_000_000, "utcTime": "2023-11-14T22:13:20"}],
        "META_DATA_EXPORT": [{"name": "EXPORT_PRODUCT_VERSION", "value": "2024.5.1.113"},
                             {"name": "EXPORT_SCHEMA_VERSION", "value": "3.13.2"}],
        "PROCESSES": [{"globalPid": gpid(PID), "pid": PID, "name": "train.py"},
                      {"globalPid": gpid(7), "pid": 7, "name": "unrelated"}],
        "OSRT_API": [{"start": s, "end": s + 5, "eventClass": 27, "globalTid": G, "nameId": 10}
                     for s in (100, 200, 300)],
    }


def gunzip_saxpy(tmp: Path) -> Path:
    """The committed real export (pipit's saxpy, see tests/data/nsys/README.md), gunzipped into ``tmp``."""
    out = tmp / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    with gzip.open(SAXPY_GZ, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out
