"""The rocprofv3 JSON reader on documents built here (tests/support/rocv3.py): what each record kind becomes, the
correlation links, the name tables, and bad input (truncated, wrong types, other JSON)."""

from __future__ import annotations

import gzip
import json

import pytest
from support import rocv3
from support.bad_input import args_of, assert_trace_error, warnings_of

from opscope.analyses.links import link_table
from opscope.ingest import open_trace, pick_reader
from opscope.ingest.rocprof.v3_json import READER

_COLUMNS = ["kind", "name", "ts_ns", "dur_ns", "device", "stream", "correlation"]
#: base_records() by hand: (kind, name, ts, dur, device, stream, correlation), in time order.
EXPECTED = [
    ("user_annotation", "train_step", 500, 5_500, None, None, 4),
    ("runtime", "hipLaunchKernel", 1_000, 500, None, None, 1),
    ("kernel", rocv3.KERNELS[1], 1_600, 1_000, 0, 1, 1),
    ("runtime", "hipLaunchKernel", 2_000, 400, None, None, 2),
    ("comm", rocv3.KERNELS[2], 2_500, 3_000, 1, 3, 2),
    ("runtime", "hipMemcpyAsync", 3_000, 600, None, None, 3),
    ("runtime", "hsa_signal_wait_scacquire", 3_100, 200, None, None, 9),
    ("memcpy", "Memcpy HtoD (Host -> Device)", 3_700, 500, 0, 1, 3),
]


def _rows(trace) -> list[tuple]:
    cols = trace.events.select(_COLUMNS).to_pydict()
    return list(zip(*(cols[c] for c in _COLUMNS), strict=True))


def _write(tmp_path, doc, name="results.json", gz=False, indent=None):
    data = rocv3.dumps(doc, indent).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_records_become_the_models_events(tmp_path):
    trace = open_trace(_write(tmp_path, rocv3.document()), use_cache=False)
    assert _rows(trace) == EXPECTED
    assert trace.metadata["format"] == "rocprofv3_json" and trace.metadata["tool"] == "rocprofv3"
    ev = trace.events.to_pydict()
    host = [(p, t) for k, p, t in zip(ev["kind"], ev["pid"], ev["tid"], strict=True) if k == "runtime"]
    assert set(host) == {("4242", "77")}


def test_kernels_and_copies_link_to_their_launches_and_the_roctx_range(tmp_path):
    trace = open_trace(_write(tmp_path, rocv3.document()), use_cache=False)
    links = link_table(trace).to_pydict()
    names = trace.events["name"].to_pylist()
    launched = {names[d]: names[r] for d, r in zip(links["device_row"], links["launch_row"], strict=True)}
    assert launched == {rocv3.KERNELS[1]: "hipLaunchKernel", rocv3.KERNELS[2]: "hipLaunchKernel",
                        "Memcpy HtoD (Host -> Device)": "hipMemcpyAsync"}
    assert links["annotation"] == ["train_step"] * 3
    assert links["link_inferred"] == [False] * 3


def test_args_carry_the_dispatch_and_the_copy(tmp_path):
    trace = open_trace(_write(tmp_path, rocv3.document()), use_cache=False)
    kernel = args_of(trace, 2)
    assert kernel == {"kernel_id": 1, "dispatch_id": 1, "queue": 16, "stream": 1, "grid_size": [65536, 2, 1],
                      "workgroup_size": [256, 1, 1], "lds_bytes": 2048, "scratch_bytes": 0, "arch_vgpr_count": 64,
                      "sgpr_count": 32, "correlation_external": 0, "thread_id": 77}
    copy = args_of(trace, 7)
    assert copy["bytes"] == 4096 and copy["operation"] == "MEMORY_COPY_HOST_TO_DEVICE"
    assert (copy["src_device"], copy["dst_device"]) == (None, 0)


def test_allocations_become_memory_records_a_free_sized_by_its_allocation(tmp_path):
    trace = open_trace(_write(tmp_path, rocv3.document()), use_cache=False)
    mem = trace.memory.to_pydict()
    assert mem["ts_ns"] == [200, 7_000]
    assert mem["bytes"] == [1 << 20, -(1 << 20)]
    assert mem["addr"] == [0x1000, 0x1000] and mem["device_id"] == [0, 0]


def test_unmapped_record_kinds_are_counted(tmp_path):
    trace = open_trace(_write(tmp_path, rocv3.document()), use_cache=False)
    assert warnings_of(trace) == {"buffer_records.scratch_memory records (not mapped)": 2,
                                  "callback_records.counter_collection records (not mapped)": 1}


def test_devices_and_the_process_in_metadata(tmp_path):
    trace = open_trace(_write(tmp_path, rocv3.document()), use_cache=False)
    props = trace.metadata["device_properties"]
    assert [p["id"] for p in props] == [0, 1]
    assert props[0]["name"] == "AMD Instinct MI300X" and props[0]["gfx"] == "gfx942"
    assert (props[0]["computeMajor"], props[0]["computeMinor"]) == (9, 4)
    assert props[0]["totalGlobalMem"] == 206141652992 and props[0]["sharedMemPerBlock"] == 65536
    assert trace.metadata["process_names"] == {"4242": "python train.py"}
    info = trace.metadata["rocprofv3"]
    assert info["processes"][0]["hostname"] == "node-a"
    assert info["records"] == {"kernel_dispatch": 2, "hip_api": 3, "hsa_api": 1, "marker_api": 1, "memory_copy": 1,
                               "memory_allocation": 2}


@pytest.mark.parametrize("variant", ["tables_last", "indented", "gzip"])
def test_key_order_whitespace_and_gzip_do_not_matter(tmp_path, variant):
    doc = rocv3.document(tables_last=variant == "tables_last")
    path = _write(tmp_path, doc, gz=variant == "gzip", indent=1 if variant == "indented" else None)
    assert _rows(open_trace(path, use_cache=False)) == EXPECTED


def test_unknown_kernel_ids_and_gpu_agents_without_an_index(tmp_path):
    recs = rocv3.base_records()
    recs["kernel_dispatch"].append(rocv3.dispatch(20, 99, rocv3.GPU1, 8_000, 8_100))
    doc = rocv3.document(recs)
    for agent in doc["rocprofiler-sdk-tool"][0]["agents"]:
        agent.pop("gpu_index")  # older SDKs: the GPUs are numbered in node order
    trace = open_trace(_write(tmp_path, doc), use_cache=False)
    last = _rows(trace)[-1]
    assert last == ("kernel", "kernel_id 99", 8_000, 100, 1, 1, 20)
    assert warnings_of(trace)["kernel dispatches whose kernel_id is not in kernel_symbols (named by the id)"] == 1


def test_msccl_kernels_are_comm_and_copies_between_gpus_are_peer(tmp_path):
    recs = rocv3.base_records()
    doc = rocv3.document(recs)
    doc["rocprofiler-sdk-tool"][0]["kernel_symbols"][1]["formatted_kernel_name"] = "mscclKernel_Sum_float(void)"
    recs = doc["rocprofiler-sdk-tool"][0]["buffer_records"]
    recs["memory_copy"].append(rocv3.copy_rec(30, rocv3.GPU0, rocv3.GPU1, 4, 9_000, 9_400, 64))
    rows = _rows(open_trace(_write(tmp_path, doc), use_cache=False))
    assert rows[2][:2] == ("comm", "mscclKernel_Sum_float(void)")
    assert rows[-1] == ("memcpy", "Memcpy PtoP (Device -> Peer)", 9_000, 400, 1, 1, 30)


# -- bad input --------------------------------------------------------------------------------------------------

def _many_kernels(n: int) -> dict:
    recs = {"kernel_dispatch": [rocv3.dispatch(i, 1, rocv3.GPU0, 1_000 * i, 1_000 * i + 10 + i)
                                for i in range(1, n + 1)]}
    return rocv3.document(recs)


@pytest.mark.parametrize("gz", [False, True])
def test_a_truncated_file_keeps_its_complete_records(tmp_path, gz):
    text = rocv3.dumps(_many_kernels(40))
    cut = text.index('"dispatch_id":31') - 5  # inside the 31st record
    data = text[:cut].encode()
    path = tmp_path / "cut.json"
    path.write_bytes(gzip.compress(data)[:-40] if gz else data)
    trace = open_trace(path, use_cache=False)
    durs = trace.events["dur_ns"].to_pylist()
    n = len(durs)
    assert n == 30 if not gz else 0 < n <= 30
    assert durs == [10 + i for i in range(1, n + 1)]
    assert any(w.startswith("file is truncated") for w in warnings_of(trace))
    assert trace.metadata["truncated"] is True


def test_truncated_before_any_record_is_an_error(tmp_path):
    text = rocv3.dumps(rocv3.document())
    path = tmp_path / "head.json"
    path.write_text(text[:text.index('"kernel_symbols"') + 30])
    assert_trace_error(path, "truncated before its first complete record")


def test_records_of_the_wrong_types_are_dropped_and_counted(tmp_path):
    doc = _many_kernels(5)
    recs = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]
    recs[1]["start_timestamp"] = "soon"
    recs[3]["dispatch_info"] = []
    trace = open_trace(_write(tmp_path, doc), use_cache=False)
    assert trace.events["correlation"].to_pylist() == [1, 3, 5]
    assert warnings_of(trace)["malformed records or records of the wrong types (dropped)"] == 2


def test_only_bad_records_is_an_error(tmp_path):
    doc = _many_kernels(2)
    for rec in doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]:
        rec["end_timestamp"] = None
    assert_trace_error(_write(tmp_path, doc), "holds no kernel dispatches")


@pytest.mark.parametrize(("doc", "words"), [
    ({"rocprofiler-sdk-tool": {"metadata": {}}}, ("not rocprofv3 JSON", "list of processes")),
    ({"rocprofiler-sdk-tool": [{"buffer_records": {"kernel_dispatch": {"a": 1}}}]}, ("not rocprofv3 JSON", "array")),
    ({"rocprofiler-sdk-tool": [{"buffer_records": []}]}, ("not rocprofv3 JSON", "buffer_records")),
    ({"rocprofiler-sdk-tool": []}, ("holds no kernel dispatches",)),
])
def test_documents_of_the_wrong_shape_are_one_line_errors(tmp_path, doc, words):
    assert_trace_error(_write(tmp_path, doc), *words)


def test_another_tools_json_object_is_not_read_as_rocprofv3(tmp_path):
    path = _write(tmp_path, {"nsys-tool": [{"buffer_records": {"kernel_dispatch": []}}],
                             "rocprofiler-sdk-tool": []})
    assert pick_reader(path).name == "chrome_json"
    assert_trace_error(path, "traceEvents")


def test_kineto_json_does_not_sniff_as_rocprofv3(tmp_path):
    kineto = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "rocprofiler-sdk-tool", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
         "args": {"device": 0, "stream": 7, "note": '{"rocprofiler-sdk-tool": ['}}]}
    path = tmp_path / "kineto.json"
    path.write_text(json.dumps(kineto))
    head = path.read_bytes()
    assert not READER.sniff(path, head)
    assert READER.sniff(path, b'\xef\xbb\xbf \n{ "rocprofiler-sdk-tool" : [')
    assert pick_reader(path).name == "chrome_json"
    assert open_trace(path, use_cache=False).events["kind"].to_pylist() == ["kernel"]


def test_a_nested_array_stops_at_its_end_without_the_salvage_path():
    """Record arrays follow each other: the chunk cutter must not take the next array's boundaries for this one's."""
    import msgspec

    from opscope.ingest.chrome.json_stream import EventArrayStream

    first = b"[" + b",".join(b'{"a":%d,"b":{"c":[1,2]}}' % i for i in range(500)) + b"]"
    rest = b',"next":[' + b",".join(b'{"z":%d}' % i for i in range(500)) + b"]}"
    data = first + rest
    blocks = iter([data[i:i + 1000] for i in range(0, len(data), 1000)])
    stream = EventArrayStream(blocks, msgspec.json.Decoder(list[dict]).decode, msgspec.json.Decoder(dict).decode,
                              chunk_size=4096, stop_at_end=True)
    items = [item for batch, _ in stream.batches() for item in batch]
    assert [item["a"] for item in items] == list(range(500))
    assert not stream.report.salvaged and not stream.report.truncated
    assert stream.rest + b"".join(blocks) == rest


def test_two_processes_in_one_file_keep_their_links_apart(tmp_path):
    doc = rocv3.document()
    second = json.loads(json.dumps(doc["rocprofiler-sdk-tool"][0]))
    second["metadata"]["pid"] = 5151
    recs = second["buffer_records"]
    recs["kernel_dispatch"] = [rocv3.dispatch(1, 1, rocv3.GPU1, 20_600, 21_600)]  # correlation 1 again
    recs["hip_api"] = [rocv3.api(5, 1, 1, 20_000, 20_500, tid=88)]
    for key in ("hsa_api", "marker_api", "memory_copy", "memory_allocation", "scratch_memory"):
        recs[key] = []
    doc["rocprofiler-sdk-tool"].append(second)
    trace = open_trace(_write(tmp_path, doc), use_cache=False)
    links = link_table(trace).to_pydict()
    ev = trace.events.to_pydict()
    pairs = {(ev["ts_ns"][d], ev["tid"][r], ev["ts_ns"][r]) for d, r in zip(links["device_row"], links["launch_row"],
                                                                             strict=True)}
    assert (1_600, "77", 1_000) in pairs and (20_600, "88", 20_000) in pairs
    assert len(pairs) == 4
    assert trace.metadata["process_names"] == {"4242": "python train.py", "5151": "python train.py"}


def test_handles_beyond_int64_are_null_not_fatal(tmp_path):
    recs = rocv3.base_records()
    recs["kernel_dispatch"][0]["dispatch_info"]["queue_id"]["handle"] = 2**64 - 1  # a uint64 handle
    trace = open_trace(_write(tmp_path, rocv3.document(recs)), use_cache=False)
    assert _rows(trace) == EXPECTED
    assert args_of(trace, 2)["queue"] is None
