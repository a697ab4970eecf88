"""Text shown to a person (opscope.text): control characters spelled out; a line stays one line."""

from __future__ import annotations

from opscope.text import one_line, printable


def test_printable_spells_out_controls_and_keeps_newlines_and_tabs():
    assert printable("a\x1b[31mb\x07c\x9b2J\rd\ne\tf\x7f") == "a\\x1b[31mb\\x07c\\x9b2J\\x0dd\ne\tf\\x7f"


def test_one_line_spells_out_newlines_too():
    name = "rec\x1b]0;title\x07\nopscope: forged"
    assert one_line(name) == "rec\\x1b]0;title\\x07\\x0aopscope: forged"
    assert "\n" not in one_line(name) and one_line("plain/path ü.json") == "plain/path ü.json"
    assert one_line("tab\there") == "tab\there"
