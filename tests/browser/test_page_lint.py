"""The page lint finds each kind of violation on a small site made for it, and nothing on a
clean page (a lint that cannot fail would pass every chapter)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from fusedrms.book import page
from tests.browser import page_lint

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<style>body{{margin:0;font:16px sans-serif}} article{{max-width:690px;margin:0 8px}}
pre{{overflow-x:auto;font:13px monospace}}</style></head>
<body><article class="bd-article"><section><h1>Title</h1>{body}</section></article></body></html>"""

CLEAN = """<p>A sentence with a number: 2.43.</p>
<div class="cell"><div class="cell_input"><pre>x = 1</pre></div>
<div class="cell_output"><div class="output"><pre>1</pre></div></div></div>
{table}
<div class="fusedrms-badge">Recorded: H200, 2026-11-30, commit abc</div>
<img width="345" style="max-width:100%" src="data:image/svg+xml;utf8,{img}">
"""

BAD = """<script>console.error("boom")</script>
<div class="fusedrms-badge">Recorded: H200</div><p>Recorded on H200 (driver 580)</p>
<p>In this session the target was met; see /work/main/_build/jupyter_execute for the budget.</p>
<div class="cell"><div class="cell_input"><pre>{long_code}</pre></div>
<div class="cell_output"><div class="output"><pre>{long_output}</pre></div></div></div>
<div class="cell"><div class="cell_output"><div class="output"><pre>{wide}</pre></div></div></div>
<div style="width:2000px">too wide</div>
<img width="300" src="data:image/svg+xml;utf8,{big_img}">
{wide_table}
<div class="pst-scrollable-table-container" style="overflow-x:auto"><table><tr><td>{wide}</td></tr></table></div>
<svg viewBox="0 0 760 100" width="760" style="max-width:100%"><text y="50" font-size="12">a</text></svg>
"""


def _svg_image(width: int) -> str:
    return (f"%3Csvg xmlns='http://www.w3.org/2000/svg' width='{width}' height='100'%3E"
            "%3Crect width='100%25' height='100%25' fill='%23ccc'/%3E%3C/svg%3E")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    wide = "w" * 400
    # fits the column at 1280 px, scrolls (with its cue) on a phone
    table = page.table([["w" * 40, 1.5]], columns=["name", "µs"], caption="Fits")._repr_html_()
    (root / "index.html").write_text(PAGE.format(body=CLEAN.format(table=table,
                                                                    img=_svg_image(690))))
    wide_table = page.table([[wide, 1.5]], columns=["name", "µs"], caption="Hides")._repr_html_()
    (root / "bad.html").write_text(PAGE.format(body=BAD.format(
        long_code="y = " + "1 + " * 30 + "1", long_output="\n".join(map(str, range(25))),
        wide=wide, big_img=_svg_image(1600), wide_table=wide_table)))
    return root


def test_a_clean_page_has_no_violation(site, browser):
    with page_lint.serve(site) as url:
        assert page_lint.lint_page(browser, url, "index.html") == []


def test_every_rule_fires_on_the_bad_page_and_says_where(site, browser):
    with page_lint.serve(site) as url:
        found = page_lint.lint_page(browser, url, "bad.html")
    rules = {v.rule for v in found}
    assert rules == {"console", "badge", "word", "code", "output", "clip", "wide", "figure",
                     "table"}, found
    words = {v.detail.split(":")[0] for v in found if v.rule == "word"}
    assert words == {"session", "target met", "machine path", "build cache", "budget"}
    assert sum(v.rule == "badge" for v in found) == 2
    clips = [v for v in found if v.rule == "clip"]
    assert {"at 1280 px" in v.detail for v in clips} == {True, False}  # both widths checked
    assert all("code cell" in v.where for v in found if v.rule in ("code", "output"))
    assert any("boom" in v.detail for v in found if v.rule == "console")
    tables = [v.detail for v in found if v.rule == "table"]
    assert any('at 1280 px table "Hides" hides' in d for d in tables), tables
    assert any("at 390 px" in d and "no scroll cue" in d for d in tables), tables
    assert not any('"Hides"' in d and "at 390" in d for d in tables)  # page.table has the cue
    figures = [v.detail for v in found if v.rule == "figure"]
    assert any("at 390 px the figure's text" in d for d in figures), figures
    assert any("at 1280 px SVG labels" in d for d in figures), figures


def _command(*args):
    return subprocess.run([sys.executable, "-m", "tests.browser.page_lint", *args],
                          cwd=page_lint.ROOT, capture_output=True, text=True, timeout=300)


def test_the_command_names_pages_and_exits_nonzero(site, browser):  # browser: skip without it
    clean, bad = _command("--site", str(site), "index.html"), _command("--site", str(site), "bad.html")
    assert clean.returncode == 0 and "index.html: 0 violation(s)" in clean.stdout
    assert bad.returncode == 1 and "bad.html:" in bad.stdout and "  word " in bad.stdout
    assert _command("--site", str(site), "missing.html").returncode == 2


def test_page_names_are_forgiving():
    assert page_lint._normalize("chapters/03_hip.ipynb") == "chapters/03_hip.html"
    assert page_lint._normalize("_build/html/chapters/03_hip.html") == "chapters/03_hip.html"


def test_page_names_are_forgiving_with_a_site(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "book").mkdir()
    (tmp_path / "chapters" / "03_hip.html").write_text("")
    (tmp_path / "book" / "glossary.html").write_text("")
    assert page_lint._normalize("03_hip", tmp_path) == "chapters/03_hip.html"
    assert page_lint._normalize("glossary", tmp_path) == "book/glossary.html"
    assert page_lint._normalize("index.html", tmp_path) == "index.html"
