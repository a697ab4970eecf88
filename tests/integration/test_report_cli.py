"""`opscope report` on bad requests and bad input (no browser): one line, exit 2, nothing overwritten, no file
left behind; and the file it writes is one self-contained document with a Content-Security-Policy."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, run_cli, run_cli_many
from support.tracefiles import small_gpu_trace, write_trace, x

#: What an HTML file must not hold to open with no network: no URL loads (scripts, images, links, styles).
FETCHES = ("src=\"http", "src='http", "href=\"http", "href='http", "@import", "url(http", "url(\"http", "url('http")


def outputs(directory: Path) -> list[str]:
    """Files in ``directory`` (hidden temporaries included): a failed write must leave none."""
    return sorted(p.name for p in directory.iterdir())


class Page(HTMLParser):
    """The parts of a report the tests read: meta tags, elements by data-key, <p class> of each key."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.metas: list[dict[str, str | None]] = []
        self.keys: dict[str, str] = {}  # data-key -> the element's class
        self.sections: list[str] = []
        self.charts: list[str] = []
        self.tags: set[str] = set()
        self.script_srcs: list[str | None] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        if tag == "script":
            self.script_srcs.append(a.get("src"))
        if tag == "meta":
            self.metas.append(a)
        if a.get("data-key"):
            self.keys[a["data-key"] or ""] = a.get("class") or ""
        if tag == "section" and a.get("id"):
            self.sections.append(a["id"] or "")
        if a.get("data-chart"):
            self.charts.append(a["data-chart"] or "")


@pytest.fixture
def out_dir(tmp_path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    return d


def test_an_existing_output_is_kept_without_force_and_replaced_with_it(trace_file, out_dir, cache):
    target = out_dir / "report.html"
    target.write_text("mine")
    res = run_cli("report", str(trace_file), "-o", str(target), cache=cache)
    assert_one_line_error(res, target, "already exists", "--force")
    assert target.read_text() == "mine"
    assert outputs(out_dir) == ["report.html"]

    res = run_cli("report", str(trace_file), "-o", str(target), "--force", cache=cache)
    assert res.returncode == 0, res.stderr
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert outputs(out_dir) == ["report.html"]


def test_an_output_it_cannot_write_is_refused_before_any_analysis(trace_file, tmp_path, cache):
    missing = tmp_path / "no" / "such" / "dir" / "report.html"
    text = tmp_path / "report.txt"
    directory = tmp_path / "a.html"
    directory.mkdir()
    res_missing, res_txt, res_dir = run_cli_many(
        [("report", str(trace_file), "-o", str(p)) for p in (missing, text, directory)], cache=cache)
    assert_one_line_error(res_missing, missing, "does not exist")
    assert not missing.parent.exists()
    assert_one_line_error(res_txt, text, ".html")
    assert not text.exists()
    assert_one_line_error(res_dir, directory, "directory")
    assert list(directory.iterdir()) == []


def test_an_unreadable_trace_gives_one_line_and_leaves_no_file(tmp_path, out_dir, cache):
    whole = json.dumps({"traceEvents": small_gpu_trace()})
    bad = {"cut_before_any_event.json": whole[:40].encode(), "empty.json": b"", "not_json.json": b"hello, world\n",
           "binary.json.gz": b"\x1f\x8b\x08\x00garbage", "list_of_numbers.json": b"[1, 2, 3]"}
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
    results = run_cli_many([("report", str(tmp_path / n), "-o", str(out_dir / f"{n}.html")) for n in bad], cache=cache)
    for name, res in zip(bad, results):
        assert_one_line_error(res, tmp_path / name)
    assert outputs(out_dir) == []


def test_a_trace_cut_mid_way_is_reported_from_its_complete_events_and_the_page_says_so(tmp_path, out_dir, cache):
    # as every other command does: the events before the cut are read, a warning names the file
    whole = json.dumps({"traceEvents": small_gpu_trace()})
    trace = tmp_path / "cut.json"
    trace.write_text(whole[: len(whole) // 2])
    target = out_dir / "cut.html"
    res = run_cli("report", str(trace), "-o", str(target), cache=cache)
    assert res.returncode == 0, res.stderr
    assert f"warning: {trace}: file is truncated" in res.stderr
    assert "file is truncated (the file ends before the trace does)" in target.read_text(encoding="utf-8")


def test_a_trace_with_no_steps_gpu_or_memory_still_gets_a_report_that_says_so(tmp_path, out_dir, cache):
    trace = write_trace(tmp_path / "cpu.json", [x("aten::linear", 0, 300), x("aten::addmm", 10, 250),
                                                x("aten::relu", 400, 50)])
    target = out_dir / "cpu.html"
    res = run_cli("report", str(trace), "-o", str(target), cache=cache)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    page = Page(target.read_text(encoding="utf-8"))
    assert page.sections == ["overview", "timeline", "gpu", "ops", "roofline", "memory", "advice"]
    for key in ("no_steps", "no_timeline", "no_gpu", "no_kernels", "no_memory", "no_roofline"):
        assert page.keys.get(key) == "empty", key
    # the one chart left is the module -> op tree (the ops took time); no empty step, device or memory chart
    assert page.charts == ["hierarchy"]


def test_timeline_steps_picks_the_steps_and_a_step_the_trace_lacks_is_refused_before_writing(trace_file, out_dir,
                                                                                              cache):
    import json
    import re

    target = out_dir / "steps.html"
    res = run_cli("report", str(trace_file), "-o", str(target), "--timeline-steps", "2", cache=cache)
    assert res.returncode == 0, res.stderr
    data = re.search(r'id="timeline-data-timeline">(.*?)</script>', target.read_text(encoding="utf-8"), re.S)
    assert data is not None
    assert [(s["step"], s["label"]) for s in json.loads(data.group(1))["steps"]] == [(2, "chosen step")]
    for bad, said in (("9", "no step 9 (its steps are 1 to 2)"), ("two", "give step numbers separated by commas")):
        missing = out_dir / f"bad-{bad}.html"
        res = run_cli("report", str(trace_file), "-o", str(missing), "--timeline-steps", bad, cache=cache)
        assert res.returncode == 2 and said in res.stderr, res.stderr
        assert not missing.exists()


def test_the_report_is_one_file_that_fetches_nothing(trace_file, out_dir, cache):
    target = out_dir / "small.html"
    res = run_cli("report", str(trace_file), "-o", str(target), cache=cache)
    assert res.returncode == 0, res.stderr
    text = target.read_text(encoding="utf-8")
    for fetch in FETCHES:
        assert fetch not in text, fetch
    page = Page(text)
    # elements that load something (the Vega bundle's own strings mention <img>: only real tags count)
    assert not page.tags & {"link", "iframe", "object", "embed", "img", "base", "frame", "audio", "video"}
    assert len(page.script_srcs) >= 2 and all(not src for src in page.script_srcs)  # inline only
    csp = [m.get("content") or "" for m in page.metas if (m.get("http-equiv") or "").lower()
           == "content-security-policy"]
    assert len(csp) == 1
    directives = {d.strip().split()[0]: d.strip().split()[1:] for d in csp[0].split(";") if d.strip()}
    assert directives["default-src"] == ["'none'"]
    assert "connect-src" not in directives  # falls back to 'none': no fetch or XHR leaves the page
    assert set(page.charts) == {"step_times", "step_busy", "critical_path", "gpu_parts", "gpu_idle", "hierarchy"}


def test_peaks_file_draws_the_roofline_and_a_bad_one_is_refused_before_any_analysis(tmp_path, out_dir, cache):
    # one aten::mm (64x128 by 128x256, bf16) launching a 10 us gemm, on a device the trace does not name
    events = [x("aten::mm", 0, 30, **{"Input Dims": [[64, 128], [128, 256]],
                                      "Input type": ["c10::BFloat16", "c10::BFloat16"]}),
              x("cudaLaunchKernel", 5, 4, cat="cuda_runtime", correlation=1),
              x("gemm_bf16", 12, 10, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=1)]
    trace = write_trace(tmp_path / "mm.json", events)
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps({"format": "opscope-peaks/1", "device": "bench box", "tflops": {"bf16": 100.0},
                                 "gbps": 1000.0, "source": "measured by hand"}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"device": "x", "tflops": {"bf16": -1}, "gbps": 1000.0, "source": "s"}))
    with_peaks, without, refused, pair = (out_dir / f"{n}.html" for n in ("with", "without", "refused", "pair"))
    results = run_cli_many([("report", str(trace), "-o", str(with_peaks), "--peaks", str(peaks)),
                            ("report", str(trace), "-o", str(without)),
                            ("report", str(trace), "-o", str(refused), "--peaks", str(bad)),
                            ("report", str(trace), str(trace), "-o", str(pair), "--peaks", str(peaks))], cache=cache)
    assert results[0].returncode == 0, results[0].stderr
    text = with_peaks.read_text(encoding="utf-8")
    assert Page(text).charts == ["gpu_parts", "gpu_idle", "hierarchy", "roofline"]
    assert f"peaks from {peaks}: bench box (measured by hand)" in text
    assert results[1].returncode == 0, results[1].stderr
    page = Page(without.read_text(encoding="utf-8"))
    assert "roofline" not in page.charts and page.keys["no_roofline"] == "empty"
    assert_one_line_error(results[2], bad)
    assert_one_line_error(results[3], "--peaks", "comparison")
    assert outputs(out_dir) == ["with.html", "without.html"]
