"""Hostile input in the model's nesting and the analyses (issue 14, parts 2 and 7): names no demangler should see,
events that overlap without nesting, ids and times at the edge of 64 bits. Expected values are worked out by hand
in each test's comments."""

from __future__ import annotations

from support import make_trace, row

from opscope.analyses.kernels import kernel_table
from opscope.analyses.names import demangle, short_name
from opscope.model.derive import LONG_NAME_CHARS

US = 1000
LONG_WARNING = "events named with more than 16,384 characters (not demangled; short names show their start)"


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
