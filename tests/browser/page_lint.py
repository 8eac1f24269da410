"""The page lint: what a reader of the built book would find wrong, page by page, with where.

    python -m tests.browser.page_lint                          # every page of _build/html
    python -m tests.browser.page_lint chapters/03_hip.html     # one page (or several)
    python -m tests.browser.page_lint --site DIR --summary     # counts per page and rule

It serves the site on 127.0.0.1, opens each page in headless Chromium (Debian's ``chromium``,
through Playwright) with no network, and reports, each with its location:

- ``console``   any console message, uncaught error, failed or foreign request
- ``clip``      a code or output block that scrolls sideways, or anything cut off at the column
                edge, at 1280 px and at 390 px (a phone); only tables (``page.table``) and
                math may scroll inside their own box
- ``wide``      anything wider than the screen outside its own scroll box (both widths)
- ``figure``    an image shown at less than 45% of its drawn width (2x images show at 50%)
                (at 1280 px); at both widths, text in a figure smaller than 9 CSS px as
                displayed: a raster figure's smallest text is its ``data-text-px`` (page.show
                writes it: the smallest label in CSS px at the drawn width; else the book's 10 pt
                labels, 13.9 px) times its displayed width over its drawn width (the image's
                pixels / 2, page.show's 2x); SVG text (animations) is its font-size times the
                displayed over the viewBox width, at least 11 px at 1280 px and 9 px at 390 px
                (an animation frame draws a phone layout, shown below the phone breakpoint)
- ``table``     at 1280 px, a page.table scroll box that hides columns (its content wider than
                the box: keep the decisive columns, move the rest to a second table); at 390 px,
                a table that scrolls without the scroll cue (page.SCROLL_CLASS: edge shadows)
- ``badge``     more than one provenance badge (or "Recorded on ..." line) on a page
- ``output``    a printed output block over 20 lines
- ``word``      words a reader should never see: session, nbval, machine paths, "the issue",
                "target ... met", build caches, budget, an exercise's "Not yet." verdict, and a
                MyST role left as text ({eval}, {glue}, {term}, {cite}...: a placeholder)
- ``code``      a code line over 80 columns

Exit status 1 when any page has a violation. ``lint(site, pages)`` is the same as a function.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SITE = Path(os.environ.get("FUSEDRMS_SITE_DIR", ROOT / "_build" / "html"))
LOCAL_HOST = "127.0.0.1"
WIDTHS = (1280, 390)
HEIGHT = 900
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"]
TIMEOUT_MS = 30_000
MAX_OUTPUT_LINES = 20
MAX_CODE_COLUMNS = 80
MIN_FIGURE_SCALE = 0.45
MIN_SVG_LABEL_PX = 11      # at 1280 px, where the column is as wide as the animations' canvas
MIN_PHONE_TEXT_PX = 9      # any figure or SVG text at 390 px (and raster figures at 1280 px)
BOOK_LABEL_PX = 10 * 100 / 72  # page.figure's 10 pt labels at 100 CSS px per inch
FIGURE_HIDPI = 2           # page.show's images carry 2 pixels per CSS pixel
DESKTOP_WIDTH = WIDTHS[0]
SKIP_DIRS = {"_static", "_sources", "_images", "_downloads"}


@dataclass(frozen=True)
class Violation:
    page: str
    rule: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"  {self.rule:<8} {self.where}: {self.detail}"


def site_pages(site: Path) -> list[str]:
    """Every HTML page of the built book, relative to the site (e.g. ``chapters/01_formula.html``)."""
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                  if not SKIP_DIRS & set(p.relative_to(site).parts))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)  # a browser hanging up is no error


@contextlib.contextmanager
def serve(site: Path):
    """Serve ``site`` on 127.0.0.1 from a thread; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = _QuietServer((LOCAL_HOST, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{LOCAL_HOST}:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


def chromium_path() -> str | None:
    return shutil.which("chromium") or next(
        (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.path.exists(p)), None)


@contextlib.contextmanager
def launch():
    """Headless Chromium through Playwright; raises RuntimeError saying what is missing."""
    chromium = chromium_path()
    if chromium is None:
        raise RuntimeError("Debian's `chromium` is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# -- in the page ------------------------------------------------------------------------------

# Shared by every check: the article, where an element is, and which boxes may scroll.
HELPERS_JS = r"""
const ROOT = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
const SCROLL_BOXES = '.fusedrms-table, .fusedrms-scroll, .pst-scrollable-table-container, mjx-container, .MathJax, .math';
function codeCells() { return [...ROOT.querySelectorAll('div.cell')]; }
function heading(el) {
  let sec = el.closest('section');
  while (sec) {
    const h = sec.querySelector(':scope > h1, :scope > h2, :scope > h3, :scope > h4');
    if (h) return h.textContent.replace(/[#¶]\s*$/, '').trim().slice(0, 60);
    sec = sec.parentElement && sec.parentElement.closest('section');
  }
  return '';
}
function locate(el) {
  const cell = el.closest('div.cell');
  let part;
  if (cell) {
    const n = codeCells().indexOf(cell) + 1;
    const io = el.closest('.cell_input') ? ' input' : (el.closest('.cell_output') ? ' output' : '');
    const src = cell.querySelector('.cell_input pre');
    const first = src ? src.textContent.split('\n')[0].trim().slice(0, 40) : '';
    part = `code cell ${n}${io}` + (first ? ` ("${first}")` : '');
  } else {
    part = el.tagName.toLowerCase() + (el.className && typeof el.className === 'string'
      ? '.' + el.className.trim().split(/\s+/).slice(0, 2).join('.') : '');
  }
  const h = heading(el);
  return (h ? `section "${h}", ` : '') + part;
}
function visible(el) {
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== 'hidden';
}
function inScrollBox(el) { return !!(el.parentElement && el.parentElement.closest(SCROLL_BOXES)); }
"""

LAYOUT_JS = HELPERS_JS + r"""
(width) => {
  const out = [];
  const seen = new Set();
  // Code and output blocks never scroll sideways.
  for (const pre of ROOT.querySelectorAll('pre')) {
    if (!visible(pre) || inScrollBox(pre)) continue;
    if (pre.scrollWidth > pre.clientWidth + 2) {
      seen.add(pre);
      out.push({rule: 'clip', where: locate(pre),
                detail: `at ${width} px the block scrolls sideways: ${pre.scrollWidth - pre.clientWidth} of ${pre.scrollWidth} px hidden`});
    }
  }
  // Anything else that hides content at its edge, except boxes meant to scroll.
  for (const el of ROOT.querySelectorAll('*')) {
    if (el.tagName === 'PRE' || el.closest('pre') || !visible(el)) continue;
    if (el.matches(SCROLL_BOXES) || inScrollBox(el)) continue;
    const ox = getComputedStyle(el).overflowX;
    if (ox === 'visible') continue;
    if (el.scrollWidth > el.clientWidth + 2 && el.clientWidth > 0) {
      if ([...seen].some(s => el.contains(s) || s.contains(el))) continue;
      seen.add(el);
      out.push({rule: 'clip', where: locate(el),
                detail: `at ${width} px ${el.scrollWidth - el.clientWidth} px of ${el.scrollWidth} are cut off (overflow ${ox})`});
    }
  }
  // Nothing wider than the screen outside its own scroll box: report the outermost offender.
  const vw = document.documentElement.clientWidth;
  for (const el of ROOT.querySelectorAll('*')) {
    if (!visible(el) || inScrollBox(el)) continue;
    const r = el.getBoundingClientRect();
    if (r.right <= vw + 1 && r.left >= -1) continue;
    const parent = el.parentElement;
    if (parent && parent !== ROOT) {
      const p = parent.getBoundingClientRect();
      if (p.right > vw + 1 || p.left < -1) continue;  // the parent is reported instead
    }
    // clipped by an ancestor that hides its overflow: that ancestor is reported as 'clip'
    let a = el.parentElement, clipped = false;
    while (a && a !== ROOT) {
      if (getComputedStyle(a).overflowX !== 'visible') { clipped = true; break; }
      a = a.parentElement;
    }
    if (clipped) continue;
    out.push({rule: 'wide', where: locate(el),
              detail: `at ${width} px it spans ${Math.round(r.left)}..${Math.round(r.right)} px of a ${vw}-px screen`});
  }
  return out;
}
"""

CONTENT_JS = HELPERS_JS + r"""
(limits) => {
  const out = [];
  // Figures: images shown at less than MIN of their drawn width.
  for (const img of ROOT.querySelectorAll('img')) {
    if (!visible(img) || !img.naturalWidth || img.naturalWidth < 64) continue;
    const scale = img.getBoundingClientRect().width / img.naturalWidth;
    if (scale < limits.figureScale)
      out.push({rule: 'figure', where: locate(img),
                detail: `a ${img.naturalWidth}-px image shown at ${Math.round(img.getBoundingClientRect().width)} px (${Math.round(scale * 100)}%): draw it for the column (page.figure)`});
  }
  // One provenance badge (or legacy "Recorded on ..." line) per page.
  const badges = [...ROOT.querySelectorAll('.fusedrms-badge')].map(b => locate(b));
  const walker = document.createTreeWalker(ROOT, NodeFilter.SHOW_TEXT);
  const texts = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement;
    if (!p || p.closest('script, style, .fusedrms-badge')) continue;
    texts.push(n);
    if (/Recorded on /.test(n.textContent)) badges.push(locate(p) + ' ("Recorded on ..." line)');
  }
  if (badges.length > 1)
    badges.forEach((w, i) => out.push({rule: 'badge', where: w,
      detail: `provenance ${i + 1} of ${badges.length} on this page (one badge per chapter)`}));
  // Printed output blocks of at most MAX lines; code lines of at most MAX columns.
  for (const pre of ROOT.querySelectorAll('pre')) {
    const lines = pre.textContent.replace(/\n$/, '').split('\n');
    if (pre.closest('.cell_output')) {
      if (lines.length > limits.outputLines)
        out.push({rule: 'output', where: locate(pre),
                  detail: `${lines.length} printed lines (at most ${limits.outputLines}: a table, a plot or a sentence instead)`});
    } else {
      const long = lines.map((l, i) => [i + 1, l.length]).filter(([, n]) => n > limits.codeColumns);
      if (long.length)
        out.push({rule: 'code', where: locate(pre),
                  detail: `${long.length} line(s) over ${limits.codeColumns} columns (line ${long[0][0]}: ${long[0][1]})`});
    }
  }
  // Words a reader should never see, in everything the page holds (collapsed parts included).
  for (const n of texts) {
    for (const [name, source] of limits.words) {
      const re = new RegExp(source, 'gi');
      let m;
      while ((m = re.exec(n.textContent)) !== null) {
        const s = n.textContent;
        const ctx = s.slice(Math.max(0, m.index - 30), m.index + m[0].length + 30).replace(/\s+/g, ' ');
        out.push({rule: 'word', where: locate(n.parentElement), detail: `${name}: "...${ctx}..."`});
      }
    }
  }
  return out;
}
"""


# What the per-width rules judge (in Python: table_violations, figure_text_violations).
FACTS_JS = HELPERS_JS + r"""
() => {
  const tables = [];
  for (const table of ROOT.querySelectorAll('table')) {
    if (!visible(table)) continue;
    let box = table.parentElement;
    while (box && box !== ROOT && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX))
      box = box.parentElement;
    if (!box || box === ROOT) continue;
    const wrap = table.closest('.fusedrms-table');
    const caption = (wrap && wrap.querySelector('.fusedrms-table-caption'))
      || table.querySelector('caption');
    const heads = [...table.querySelectorAll('th')].slice(0, 3).map(th => th.textContent.trim());
    const style = getComputedStyle(box);
    tables.push({where: locate(table),
                 label: caption ? caption.textContent.trim().slice(0, 60) : heads.join(' | '),
                 page_table: !!wrap, scroll_width: box.scrollWidth, client_width: box.clientWidth,
                 cue: style.backgroundAttachment.includes('local') && style.backgroundImage.includes('gradient')});
  }
  const images = [];
  for (const img of ROOT.querySelectorAll('img')) {
    if (!visible(img) || !img.naturalWidth || img.naturalWidth < 64) continue;
    const text = parseFloat(img.dataset.textPx);
    images.push({where: locate(img), natural_width: img.naturalWidth,
                 shown_width: img.getBoundingClientRect().width, text_px: isNaN(text) ? null : text});
  }
  const svgs = [];
  for (const svg of ROOT.querySelectorAll('svg')) {
    if (!visible(svg) || svg.closest('.jupyter-widgets i, button, .headerlink, .fa, .toggle-button')) continue;
    const vb = svg.viewBox && svg.viewBox.baseVal;
    const drawn = vb && vb.width ? vb.width : 0;
    if (!drawn || drawn < 64) continue;  // icons
    let smallest = Infinity;
    for (const t of svg.querySelectorAll('text')) {
      const size = parseFloat(t.getAttribute('font-size') || getComputedStyle(t).fontSize);
      if (size && t.textContent.trim()) smallest = Math.min(smallest, size);
    }
    if (smallest < Infinity)
      svgs.push({where: locate(svg), drawn_width: drawn, shown_width: svg.getBoundingClientRect().width,
                 font_px: smallest, animation: !!svg.closest('.fusedrms-frame')});
  }
  return {tables, images, svgs};
}
"""


def _finding(rule: str, where: str, detail: str) -> dict:
    return {"rule": rule, "where": where, "detail": detail}


def table_violations(tables: list[dict], width: int) -> list[dict]:
    """At the desktop width a page.table hides no column; at any narrower width a table that
    scrolls shows the scroll cue. ``tables``: FACTS_JS's measurements of each scroll box."""
    out = []
    for t in tables:
        hidden = t["scroll_width"] - t["client_width"]
        if hidden <= 1:
            continue
        name = f'table "{t["label"]}"' if t["label"] else "a table"
        if width >= DESKTOP_WIDTH and t["page_table"]:
            out.append(_finding("table", t["where"], (
                f"at {width} px {name} hides {hidden} of its {t['scroll_width']} px behind its "
                "scroll box: keep the decisive columns, move the rest to a second table")))
        elif width < DESKTOP_WIDTH and not t["cue"]:
            out.append(_finding("table", t["where"], (
                f"at {width} px {name} scrolls ({hidden} px hidden) with no scroll cue "
                "(page.table's edge shadows)")))
    return out


def shown_text_px(text_px: float | None, natural_width: float, shown_width: float,
                  hidpi: float = FIGURE_HIDPI) -> float:
    """A raster figure's smallest text as displayed, in CSS px: its text at the drawn width
    (``text_px``, else the book's 10 pt labels) scaled by displayed over drawn width, the drawn
    width being the image's pixels over ``hidpi``."""
    drawn = natural_width / hidpi
    return (BOOK_LABEL_PX if text_px is None else text_px) * shown_width / drawn


def figure_text_violations(images: list[dict], svgs: list[dict], width: int) -> list[dict]:
    """Text in raster figures and in SVGs smaller than the book allows at ``width``."""
    out = []
    for img in images:
        px = shown_text_px(img["text_px"], img["natural_width"], img["shown_width"])
        if px < MIN_PHONE_TEXT_PX - 0.05:
            out.append(_finding("figure", img["where"], (
                f"at {width} px the figure's text shows at {px:.1f} px (at least "
                f"{MIN_PHONE_TEXT_PX}): a {img['natural_width']}-px image shown "
                f"{round(img['shown_width'])} px wide; page.show draws a phone version")))
    least = MIN_SVG_LABEL_PX if width >= DESKTOP_WIDTH else MIN_PHONE_TEXT_PX
    for svg in svgs:
        px = svg["font_px"] * svg["shown_width"] / svg["drawn_width"]
        if px < least - 0.05:
            out.append(_finding("figure", svg["where"], f"at {width} px SVG labels as small as "
                                f"{px:.1f} px as displayed (at least {least})"))
    return out


# (name, JavaScript regular expression), matched case-insensitively.
FORBIDDEN_WORDS = [
    ("session", r"\bsessions?\b"),
    ("nbval", r"nbval"),
    ("machine path", r"(?:^|[^\w.~-])/(?:tmp|root|work|home|scratch)/"),
    ("the issue", r"\bthe issue\b"),
    ("target met", r"\btargets?\b[^.\n]{0,40}?\bmet\b"),
    ("build cache", r"build[ _-]?cache|jupyter_cache|__pycache__|_build/(?:\.doctrees|jupyter_execute)"
                    r"|/_cache\b"),
    ("budget", r"\bbudget"),
    # an exercise cell as the notebook starts says "Your turn."; a verdict before any answer
    # would tell every reader of the static site that they failed
    ("verdict before an answer", r"\bNot yet\."),
    # a MyST role the build left as text: an inline value, a glossary term or a citation that a
    # reader sees as markup instead of its value
    ("placeholder", r"\{(?:eval|glue(?::\w+)?|term|cite(?::\w+)?|numref|ref|doc)\}`"),
]


def wait_until_rendered(page) -> str | None:
    """Wait for math and widgets to finish drawing; return what never rendered, if anything."""
    try:
        if page.locator(".math").count():
            page.wait_for_function("() => [...document.querySelectorAll('.math')]"
                                   ".every(m => m.querySelector('mjx-container'))")
        if page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
            page.wait_for_selector(".jupyter-widgets", state="attached")
        page.wait_for_timeout(300)  # the last layout pass after fonts and widgets
    except Exception as e:  # playwright's TimeoutError
        return str(e).splitlines()[0]
    return None


def lint_page(browser, base_url: str, path: str, widths=WIDTHS) -> list[Violation]:
    """Every violation on one page of the site served at ``base_url``."""
    found: list[dict] = []
    context = browser.new_context(viewport={"width": widths[0], "height": HEIGHT},
                                  service_workers="block")
    context.set_default_timeout(TIMEOUT_MS)

    def route(r):
        if urlsplit(r.request.url).hostname == LOCAL_HOST:
            r.continue_()
        else:
            found.append({"rule": "console", "where": "network",
                          "detail": f"request to another host: {r.request.url}"})
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: found.append(
        {"rule": "console", "where": f"console.{m.type}", "detail": m.text[:300]}))
    page.on("pageerror", lambda e: found.append(
        {"rule": "console", "where": "uncaught", "detail": str(e)[:300]}))
    page.on("response", lambda r: r.status >= 400 and found.append(
        {"rule": "console", "where": "network", "detail": f"HTTP {r.status} {r.url}"}))
    # (a load the browser cancels, as on the index page's instant redirect, is no failure)
    page.on("requestfailed", lambda r: urlsplit(r.url).hostname == LOCAL_HOST
            and "ERR_ABORTED" not in (r.failure or "") and found.append(
                {"rule": "console", "where": "network",
                 "detail": f"failed request {r.url} ({r.failure})"}))
    try:
        response = page.goto(base_url + path, wait_until="load")
        if response is None or not response.ok:
            return [Violation(path, "console", "network",
                              f"HTTP {response and response.status} for the page itself")]
        page.wait_for_load_state("networkidle")
        # Chromium asks for /favicon.ico behind the page's back (no event reports it) when the
        # page names no icon.
        if not page.locator('link[rel~="icon"]').count():
            status = context.request.get(base_url + "favicon.ico").status
            if status >= 400:
                found.append({"rule": "console", "where": "network",
                              "detail": f"no icon link, and /favicon.ico answers HTTP {status}"})
        problem = wait_until_rendered(page)
        if problem:
            found.append({"rule": "console", "where": "render",
                          "detail": f"math or widgets never rendered ({problem})"})
        limits = {"figureScale": MIN_FIGURE_SCALE, "outputLines": MAX_OUTPUT_LINES,
                  "codeColumns": MAX_CODE_COLUMNS,
                  "words": FORBIDDEN_WORDS}
        found += page.evaluate(CONTENT_JS, limits)
        for i, width in enumerate(widths):
            if i:
                page.set_viewport_size({"width": width, "height": HEIGHT})
                page.wait_for_timeout(300)
            found += page.evaluate(LAYOUT_JS, width)
            facts = page.evaluate(FACTS_JS)
            found += table_violations(facts["tables"], width)
            found += figure_text_violations(facts["images"], facts["svgs"], width)
    finally:
        context.close()
    return [Violation(path, f["rule"], f["where"], f["detail"]) for f in found]


def lint(site: Path = DEFAULT_SITE, pages: list[str] | None = None) -> dict[str, list[Violation]]:
    """Violations per page (every page of ``site`` when ``pages`` is None)."""
    site = Path(site)
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"no built book at {site}: run `make book` first")
    pages = pages or site_pages(site)
    missing = [p for p in pages if not (site / p).is_file()]
    if missing:
        raise FileNotFoundError(f"not in {site}: {missing} (pages look like chapters/01_formula.html)")
    with serve(site) as url, launch() as browser:
        return {p: lint_page(browser, url, p) for p in pages}


def _normalize(page: str, site: Path = DEFAULT_SITE) -> str:
    """Accept chapters/03_hip.html, chapters/03_hip.ipynb, _build/html/chapters/03_hip.html, 03_hip."""
    p = page.replace("\\", "/")
    if "_build/html/" in p:
        p = p.split("_build/html/", 1)[1]
    if p.endswith(".ipynb") or p.endswith(".md"):
        p = p.rsplit(".", 1)[0] + ".html"
    if not p.endswith(".html"):
        p += ".html"
    if "/" not in p and not (Path(site) / p).is_file():
        for folder in ("chapters", "book"):
            if (Path(site) / folder / p).is_file():
                return f"{folder}/{p}"
    return p


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="*", help="pages to lint (default: every page)")
    parser.add_argument("--site", type=Path, default=DEFAULT_SITE, help="the built book")
    parser.add_argument("--summary", action="store_true", help="counts per page and rule only")
    args = parser.parse_args(argv)
    try:
        result = lint(args.site, [_normalize(p, args.site) for p in args.pages] or None)
    except (FileNotFoundError, RuntimeError) as e:
        print(f"page lint: {e}", file=sys.stderr)
        return 2
    total = 0
    for page, violations in result.items():
        total += len(violations)
        counts = {}
        for v in violations:
            counts[v.rule] = counts.get(v.rule, 0) + 1
        summary = ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "clean"
        print(f"{page}: {len(violations)} violation(s)" + (f" ({summary})" if violations else ""))
        if not args.summary:
            for v in violations:
                print(v)
    print(f"{total} violation(s) on {len(result)} page(s)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
