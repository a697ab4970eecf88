"""A :class:`Page` as one self-contained HTML file: the template, the styles, the table script, the Vega
bundle and, where the page has a timeline, the timeline library (flame-chart-js, vendored in ``assets/`` with its
license) all inline, nothing fetched when it is opened (a Content-Security-Policy forbids any request).

Escaping: jinja2 autoescapes every string in the page; chart specs and timeline data travel as JSON inside
``<script type="application/json">`` with ``<``, ``>``, ``&``, U+2028 and U+2029 written as ``\\u003c``... so that
no trace text (an op named ``</script>``) can end the element early.
"""

from __future__ import annotations

import datetime as dt
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

from opscope.errors import UsageError
from opscope.render.html.page import ChartBlock, Page, TimelineBlock
from opscope.render.html.tables import table_view
from opscope.version import __version__

_ASSETS = "opscope.render.html"


def render_page(page: Page) -> str:
    """The page as HTML text."""
    template = _environment().get_template("report.html.j2")
    charts = {b.key: _script_json(b.spec) for s in page.sections for b in s.blocks if isinstance(b, ChartBlock)}
    timelines = {b.key: _script_json(b.data) for s in page.sections for b in s.blocks if isinstance(b, TimelineBlock)}
    return template.render(page=page, charts=charts, timelines=timelines, table=table_view, css=_asset("report.css"),
                           script=_asset("report.js"), vega=vega_bundle(),
                           timeline_library=timeline_bundle() if timelines else "", version=__version__,
                           generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def _script_json(spec: dict[str, Any]) -> str:
    text = json.dumps(spec, separators=(",", ":"), allow_nan=False, default=str)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


@cache
def _environment():
    try:
        import jinja2
    except ImportError:
        raise UsageError("the HTML report needs the view extra: pip install 'opscope[view]'") from None
    return jinja2.Environment(loader=jinja2.PackageLoader(_ASSETS, "assets"), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _asset(name: str) -> str:
    return resources.files(_ASSETS).joinpath("assets").joinpath(name).read_text(encoding="utf-8")


def timeline_bundle() -> str:
    """flame-chart-js's minified release (``assets/flame-chart-js.min.js``, MIT: ``flame-chart-js.LICENSE.txt``)."""
    text = _asset("flame-chart-js.min.js")
    if "</script" in text.lower():  # it is inlined in a <script> element
        raise RuntimeError("the timeline library holds '</script' and cannot be inlined")
    return text


def vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script, from vl-convert (which carries them; nothing is
    downloaded). Bundling takes about a second, so the result is kept in opscope's cache directory."""
    try:
        import vl_convert as vlc
    except ImportError:
        raise UsageError("the HTML report needs the view extra: pip install 'opscope[view]'") from None
    from opscope.paths import cache_root

    version = getattr(vlc, "__version__", "unknown")
    path = cache_root() / f"vega-bundle-{version}.js"
    try:
        text = path.read_text(encoding="utf-8")
        if len(text) > 100_000:  # written whole (renamed into place), so only a foreign file could be short
            return text
    except OSError:
        pass
    # None: the default snippet (typed `str` from vl-convert 1.9 on, without types before: Any fits both)
    text = cast(Any, vlc).javascript_bundle(None)
    if "</script" in text.lower():  # it is inlined in a <script> element
        raise RuntimeError("the Vega bundle holds '</script' and cannot be inlined")
    _store(path, text)
    return text


def _store(path: Path, text: str) -> None:
    """Keep the bundle for next time; a cache that cannot be written only costs the next report a second."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{id(text)}.part")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass
