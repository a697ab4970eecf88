"""Small rocprofv3 JSON documents (rocprofiler-sdk-tool shape), built in the tests: one process with a CPU and two
GPU agents, the name tables, and records linked by correlation id."""

from __future__ import annotations

import copy
import json
from typing import Any

CPU, GPU0, GPU1 = 100, 200, 201
#: strings.buffer_records, indexed by a record's "kind" (the SDK's numbering for the kinds used here).
KIND_NAMES = {1: "HSA_CORE_API", 5: "HIP_RUNTIME_API", 7: "MARKER_CORE_API", 10: "MEMORY_COPY", 11: "KERNEL_DISPATCH",
              12: "SCRATCH_MEMORY", 14: "RCCL_API", 16: "MEMORY_ALLOCATION"}
OPERATIONS = {
    1: ["hsa_init", "hsa_shut_down", "hsa_signal_wait_scacquire"],
    5: ["hipApiNone", "hipLaunchKernel", "hipMemcpyAsync", "hipMalloc"],
    7: ["roctxMarkA", "roctxRangePushA", "roctxRangePop"],
    10: ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST",
         "MEMORY_COPY_DEVICE_TO_DEVICE"],
    11: ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"],
    12: ["SCRATCH_MEMORY_NONE", "SCRATCH_MEMORY_ALLOC"],
    14: ["ncclAllGather", "ncclAllReduce"],
    16: ["MEMORY_ALLOCATION_NONE", "MEMORY_ALLOCATION_ALLOCATE", "MEMORY_ALLOCATION_VMEM_ALLOCATE",
         "MEMORY_ALLOCATION_FREE"],
}
KERNELS = {1: "void gemm_kernel<float>(float*, int)", 2: "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"}


def corr(i: int) -> dict:
    return {"internal": i, "external": 0}


def api(kind: int, op: int, cid: int, start: int, end: int, tid: int = 77) -> dict:
    return {"size": 48, "kind": kind, "operation": op, "correlation_id": corr(cid), "start_timestamp": start,
            "end_timestamp": end, "thread_id": tid}


def dispatch(cid: int, kernel_id: int, agent: int, start: int, end: int, stream: int | None = 1) -> dict:
    rec: dict[str, Any] = {
        "size": 184, "kind": 11, "operation": 2, "thread_id": 77, "correlation_id": corr(cid),
        "start_timestamp": start, "end_timestamp": end,
        "dispatch_info": {"size": 72, "agent_id": {"handle": agent}, "queue_id": {"handle": 16},
                          "kernel_id": kernel_id, "dispatch_id": cid, "private_segment_size": 0,
                          "group_segment_size": 2048, "workgroup_size": {"x": 256, "y": 1, "z": 1},
                          "grid_size": {"x": 65536, "y": 2, "z": 1}}}
    if stream is not None:
        rec["stream_id"] = {"handle": stream}
    return rec


def copy_rec(cid: int, src: int, dst: int, op: int, start: int, end: int, nbytes: int) -> dict:
    return {**api(10, op, cid, start, end), "src_agent_id": {"handle": src}, "dst_agent_id": {"handle": dst},
            "bytes": nbytes, "stream_id": {"handle": 1}}


def agents() -> list[dict]:
    cpu = {"size": 312, "id": {"handle": CPU}, "type": 1, "gpu_index": -1, "name": "AMD EPYC", "node_id": 0}
    gpus = [{"size": 312, "id": {"handle": h}, "type": 2, "gpu_index": i, "name": "gfx942", "node_id": i + 1,
             "product_name": "AMD Instinct MI300X", "gfx_target_version": 90402, "cu_count": 304,
             "wave_front_size": 64, "workgroup_max_size": 1024, "lds_size_in_kb": 64,
             "mem_banks": [{"size_in_bytes": 206141652992}]} for i, h in enumerate((GPU0, GPU1))]
    return [cpu, *gpus]


def base_records() -> dict[str, list]:
    """A roctx range around two kernel launches and a copy; the kernels and copy carry their launches' ids."""
    return {
        "kernel_dispatch": [dispatch(1, 1, GPU0, 1_600, 2_600), dispatch(2, 2, GPU1, 2_500, 5_500, stream=3)],
        "hip_api": [api(5, 1, 1, 1_000, 1_500), api(5, 1, 2, 2_000, 2_400), api(5, 2, 3, 3_000, 3_600)],
        "hsa_api": [api(1, 2, 9, 3_100, 3_300)],
        "marker_api": [api(7, 1, 4, 500, 6_000)],
        "rccl_api": [],
        "memory_copy": [copy_rec(3, CPU, GPU0, 2, 3_700, 4_200, 4096)],
        "memory_allocation": [
            {**api(16, 1, 5, 200, 300), "agent_id": {"handle": GPU0}, "address": "0x0000000000001000",
             "allocation_size": 1 << 20},
            {**api(16, 3, 6, 7_000, 7_100), "agent_id": {"handle": GPU0}, "address": "0x0000000000001000",
             "allocation_size": 0}],
        "scratch_memory": [api(12, 1, 7, 10, 20), api(12, 1, 8, 30, 40)],
        "pc_sample_host_trap": [],
    }


def document(records: dict[str, list] | None = None, *, tables_last: bool = False, **extra: Any) -> dict:
    """The document; ``tables_last`` puts the records before the name tables (the reader must wait for them)."""
    kinds = [{"kind": KIND_NAMES.get(i, "NONE"), "operations": OPERATIONS.get(i, [])} for i in range(17)]
    process: dict[str, Any] = {
        "metadata": {"node": {"hostname": "node-a"}, "pid": 4242, "init_time": 0, "fini_time": 10_000,
                     "command": ["python", "train.py"]},
        "agents": agents(),
        "counters": [],
        "strings": {"callback_records": [], "buffer_records": kinds,
                    "marker_api": [{"key": 4, "value": "train_step"}]},
        "code_objects": [],
        "kernel_symbols": [{"kernel_id": 0, "formatted_kernel_name": "0"}] + [
            {"kernel_id": k, "kernel_name": f"_Z{k}.kd", "formatted_kernel_name": n, "arch_vgpr_count": 64,
             "sgpr_count": 32} for k, n in KERNELS.items()],
        "summary": [],
        "callback_records": {"counter_collection": [{"dispatch_data": {}, "records": []}]},
        "buffer_records": copy.deepcopy(records if records is not None else base_records()),
    }
    process.update(extra)
    if tables_last:
        process = {"buffer_records": process.pop("buffer_records"), **process}
    return {"rocprofiler-sdk-tool": [process]}


def dumps(doc: dict, indent: int | None = None) -> str:
    return json.dumps(doc, indent=indent, separators=None if indent else (",", ":"))
