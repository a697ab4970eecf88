"""Screenshot an `opscope report` HTML file in chromium (the system one, driven by playwright), offline.

    python tools/screenshot_report.py REPORT.html OUT.png [--full] [--section ID]

The page opens 1300 px wide with every request that is not a file:// URL aborted; the shot is taken once every
chart is drawn. --section scrolls that section (overview, gpu, ops, roofline, memory, advice) to the top first; --full
takes the whole page instead of the window. Exit 1, with the reason, when a chart failed or the page logged an
error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

#: The same launch flags as tests/browser/conftest.py: no sandbox (containers, root), no traffic of its own.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
_ALL_CHARTS_DRAWN = ("() => Array.from(document.querySelectorAll('[data-chart]'))"
                     ".every(e => e.dataset.rendered === 'true' || e.dataset.rendered === 'error')")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the report's HTML file")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--full", action="store_true", help="the whole page, not the 1300x900 window")
    parser.add_argument("--section", help="scroll this section's id (e.g. ops) to the top first")
    parser.add_argument("--height", type=int, default=900, help="window height in px (default 900)")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    executable = shutil.which(os.environ.get("OPSCOPE_CHROMIUM") or "chromium") or shutil.which("chromium-browser")
    if executable is None:
        print("screenshot_report: no chromium executable found (apt-get install chromium)", file=sys.stderr)
        return 1
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1300, "height": args.height})
        context.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
        page = context.new_page()
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(args.report.resolve().as_uri())
        page.wait_for_function(_ALL_CHARTS_DRAWN, timeout=30_000)
        failed = page.eval_on_selector_all("[data-chart][data-rendered=error]", "els => els.map(e => e.dataset.chart)")
        if args.section:
            if page.query_selector(f"section#{args.section}") is None:
                problems.append(f"the report has no section {args.section!r}")
            else:
                page.eval_on_selector(f"section#{args.section}", "s => s.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(args.out), full_page=args.full)
        browser.close()
    if failed or problems:
        print(f"screenshot_report: charts not drawn: {failed}; page errors: {problems}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
