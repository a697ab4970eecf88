"""Hostile input in the model's nesting and the analyses: names no demangler should see,
events that overlap without nesting, ids and times at the edge of 64 bits. Expected values are worked out by hand
in each test's comments."""

from __future__ import annotations

from support import make_trace, row
from support.tracefiles import write_trace, x

from opscope.analyses.kernels import kernel_table
from opscope.analyses.names import demangle, short_name
from opscope.analyses.summary import summarize
from opscope.ingest import open_trace
from opscope.model.derive import LONG_NAME_CHARS

US = 1000
LONG_WARNING = "events named with more than 16,384 characters (not demangled; short names show their start)"
OVERLAP_WARNING = ("events overlap the event they start in partly, on the same thread (not nested); their shared time "
                   "is counted once in self times")


def _warnings(trace) -> dict[str, int]:
    return {w["problem"]: w["count"] for w in trace.warnings}


# --- names too long to demangle ------------------------------------------------------------------

def test_a_name_longer_than_the_limit_is_not_demangled_and_its_short_form_says_so():
    name = "_Z" + "<" * (400_000 - 2)
    assert demangle(name) == name
    assert short_name(name) == "_Z" + "<" * 198 + "… (400,000 characters, not demangled)"


def test_a_trace_with_a_long_kernel_name_counts_it_and_its_kernel_table_shows_the_short_form():
    name = "_Z" + "<" * (LONG_NAME_CHARS + 1 - 2)
    trace = make_trace([row("cpu_op", "aten::mm", 0, 10),
                        row("kernel", name, 2, 5, pid=0, tid=7, stream=7, device=0),
                        row("kernel", name, 8, 5, pid=0, tid=7, stream=7, device=0),
                        row("kernel", "_Z" + "<" * (LONG_NAME_CHARS - 2), 14, 5, pid=0, tid=7, stream=7, device=0)])
    assert _warnings(trace)[LONG_WARNING] == 2  # two rows named with 16,385 characters; 16,384 is within the limit
    shown = kernel_table(trace, names="short").sort_by("calls")
    assert shown["name"].to_pylist() == ["_Z", "_Z" + "<" * 198 + "… (16,385 characters, not demangled)"]
    assert shown["calls"].to_pylist() == [1, 2]


def test_the_shortener_reads_a_bracket_soup_under_the_limit_to_its_qualified_name():
    # every "<" opens a template argument list that never closes: what is left outside all of them is "_Z"
    assert short_name("_Z" + "<" * (LONG_NAME_CHARS - 2)) == "_Z"
    # operators keep their "<" (looked back at by one character, not by rescanning the name)
    assert short_name("bool ns::operator<<(int, int)") == "ns::operator<<"
    assert short_name("bool std::operator< <int, float>(std::pair<int, float> const&)") == "std::operator<"


def test_a_tensile_like_name_that_is_not_all_word_characters_is_kept_whole():
    # not a Tensile GEMM name (ends in "!"): no tile shape is cut out of it, and the check does not backtrack
    name = "Cijk_" + "_MT1x1x1" * 2000 + "!"
    assert short_name(name) == name
    assert short_name("Cijk_Ailk_Bljk_SB_MT64x64x16_MI16x16x4_SN_LDSB1") == "Cijk_Ailk_Bljk_SB_MT64x64x16_MI16x16x4"


# --- events that overlap without nesting --------------------------------------------------------

def _self_us(trace) -> dict[str, float]:
    ev = trace.events
    return {n: s / US for n, s in zip(ev["name"].to_pylist(), ev["self_ns"].to_pylist())}


def test_a_grandchild_running_past_its_parent_takes_the_rest_of_its_time_from_the_grandparent():
    # A [0, 600) > B [100, 300) > C [250, 400): C starts in B and runs 100 us past it, inside A.
    # The innermost running event owns each instant: A [0,100) + [400,600) = 300, B [100,250) = 150,
    # C [250,400) = 150; together 600, A's span (before: A kept [300,400) too, 700 in all).
    trace = make_trace([row("cpu_op", "A", 0, 600), row("cpu_op", "B", 100, 200), row("cpu_op", "C", 250, 150)])
    assert _self_us(trace) == {"A": 300, "B": 150, "C": 150}
    assert _warnings(trace)[OVERLAP_WARNING] == 1
    parents = dict(zip(trace.events["name"].to_pylist(), trace.events["parent"].to_pylist()))
    assert parents == {"A": None, "B": 0, "C": 1}  # C's parent is still the event it starts in


def test_an_event_running_past_two_levels_takes_from_each_what_it_covers():
    # A [0,1000) > B [100,500) > C [200,400); D [300,700) starts in C and outlives C and B.
    # Owners: [0,100) A, [100,200) B, [200,300) C, [300,700) D, [700,1000) A -> A 400, B 100, C 100, D 400.
    trace = make_trace([row("cpu_op", "A", 0, 1000), row("cpu_op", "B", 100, 400), row("cpu_op", "C", 200, 200),
                        row("cpu_op", "D", 300, 400)])
    assert _self_us(trace) == {"A": 400, "B": 100, "C": 100, "D": 400}
    assert _warnings(trace)[OVERLAP_WARNING] == 1
    by_kind = summarize(trace).by_kind.to_pylist()
    assert [(r["kind"], r["total_ns"]) for r in by_kind] == [("cpu_op", 1000 * US)]  # the busy time, once


def test_two_overlapping_siblings_share_their_overlap_once():
    # A [0,600), B [400,1000) on one thread: A owns [0,400), B [400,1000): 400 + 600 = 1000, the busy time.
    trace = make_trace([row("cpu_op", "A", 0, 600), row("cpu_op", "B", 400, 600)])
    assert _self_us(trace) == {"A": 400, "B": 600}
    assert _warnings(trace)[OVERLAP_WARNING] == 1


def test_nested_events_and_other_threads_are_not_counted_as_overlapping():
    # A [0,600) > B [100,300) on thread 1; C [250,900) on thread 2 overlaps A in time but not on its thread
    trace = make_trace([row("cpu_op", "A", 0, 600), row("cpu_op", "B", 100, 200),
                        row("cpu_op", "C", 250, 650, tid=2)])
    assert _self_us(trace) == {"A": 400, "B": 200, "C": 650}
    assert OVERLAP_WARNING not in _warnings(trace)


def test_an_event_ending_near_2_to_the_62_ns_keeps_its_end():
    # times are kept within +-2^61 ns (the builder drops the rest), so ts + dur < 2^62 never wraps in int64:
    # A [2^61 - 100, 2^62 - 100) holds B [2^61 - 90, 2^62 - 100), which ends with it: A's self time is 10 ns
    big = 2**61
    trace = make_trace([{"kind": "cpu_op", "name": "A", "ts_ns": big - 100, "dur_ns": big},
                        {"kind": "cpu_op", "name": "B", "ts_ns": big - 90, "dur_ns": big - 10}])
    assert trace.events["self_ns"].to_pylist() == [10, big - 10]
    assert trace.events["parent"].to_pylist() == [None, 0]
    assert OVERLAP_WARNING not in _warnings(trace)


# --- correlation ids beyond int64 ---------------------------------------------------------------

def test_correlation_ids_that_are_not_int64_are_counted_and_left_out(tmp_path):
    path = write_trace(tmp_path / "t.json", [
        x("cudaLaunchKernel", 0, 5, cat="cuda_runtime", correlation=2**64),
        x("gemm", 10, 20, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=2**64),
        x("cudaLaunchKernel", 40, 5, cat="cuda_runtime", correlation=1.5),
        x("cudaLaunchKernel", 50, 5, cat="cuda_runtime", correlation=2**63 - 1),
        x("cudaLaunchKernel", 60, 5, cat="cuda_runtime"),
    ])
    trace = open_trace(path, use_cache=False)
    assert trace.events["correlation"].to_pylist() == [None, None, None, 2**63 - 1, None]
    problem = ("events whose correlation id is not an integer within 64 bits (id left out: their launch and device "
               "work are not linked)")
    assert _warnings(trace)[problem] == 3  # 2^64 twice and 1.5; the absent one is not a bad id
