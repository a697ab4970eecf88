"""A real browser (Debian's chromium, driven by playwright) for the HTML report's tests.

One browser for the whole session; each report opens in a fresh context where every request that is not a
``file://`` URL is aborted and recorded, console errors/warnings and page errors are collected, and the page is
ready once every chart says it was drawn (``data-rendered``). Skips, with the reason, only when playwright is
not importable or no chromium executable is found (playwright never downloads its own browser here).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.timing import limit

#: The flags the screenshot tool uses too: no sandbox (containers, root), no network chatter of its own.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
#: How long the charts may take to draw (a fresh page compiles the Vega bundle: well under a second idle)
RENDER_TIMEOUT_MS = round(limit(20) * 1000)

_ALL_CHARTS_DRAWN = ("() => Array.from(document.querySelectorAll('[data-chart]'))"
                     ".every(e => e.dataset.rendered === 'true' || e.dataset.rendered === 'error')")


def pytest_configure(config) -> None:
    # registered here (not in pyproject): `pytest -m browser` runs only these, `-m "not browser"` skips them
    config.addinivalue_line("markers", "browser: opens reports in chromium (seconds; part of the normal run)")


def chromium_path() -> str | None:
    """$OPSCOPE_CHROMIUM, else chromium (Debian) or chromium-browser (Ubuntu) on PATH."""
    given = os.environ.get("OPSCOPE_CHROMIUM")
    if given:
        return shutil.which(given)
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Opened:
    """A report open in the browser, and what happened while it loaded."""

    page: Any
    #: URLs of requests that were not file:// (aborted; a self-contained report makes none)
    requests: list[str] = field(default_factory=list)
    #: console errors and warnings ("error: ..."), and uncaught page errors ("pageerror: ...")
    problems: list[str] = field(default_factory=list)

    def charts(self) -> dict[str, str]:
        """Each chart's key and its data-rendered state."""
        return self.page.eval_on_selector_all(
            "[data-chart]", "els => Object.fromEntries(els.map(e => [e.dataset.chart, e.dataset.rendered]))")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the browser tests need the playwright package (pip install playwright; it drives the "
                    "system chromium, no browser download)")
    executable = chromium_path()
    if executable is None:
        pytest.skip("no chromium executable found (apt-get install chromium, or set OPSCOPE_CHROMIUM)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def open_report(browser) -> Iterator[Callable[[Path], Opened]]:
    """``open_report(path)``: the report opened offline, its charts drawn (or failed), in a context of its own."""
    contexts: list[Any] = []

    def open_(path: Path) -> Opened:
        context = browser.new_context(viewport={"width": 1300, "height": 900})
        contexts.append(context)
        page = context.new_page()
        opened = Opened(page)

        def route(r) -> None:
            url = r.request.url
            if url.startswith("file://"):
                r.continue_()
            else:
                opened.requests.append(url)
                r.abort()

        context.route("**/*", route)
        page.on("console", lambda m: opened.problems.append(f"{m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: opened.problems.append(f"pageerror: {e}"))
        page.goto(Path(path).resolve().as_uri())
        page.wait_for_function(_ALL_CHARTS_DRAWN, timeout=RENDER_TIMEOUT_MS)
        return opened

    yield open_
    for context in contexts:
        context.close()
