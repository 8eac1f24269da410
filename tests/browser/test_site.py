"""The built book in headless Chromium, with no network: pages, animation, dropdown, no CDN.

Serves ``_build/html`` (or ``$FUSEDRMS_SITE_DIR``) on 127.0.0.1 from a thread and drives Debian's
``chromium`` through Playwright. Every request to another host is recorded and aborted, so a page
that still depends on a CDN fails here exactly as it would for a reader who is offline.
Skipped locally when the site or chromium is missing; CI sets FUSEDRMS_REQUIRE_BROWSER=1 to fail.
Set FUSEDRMS_SCREENSHOTS=<dir> to keep screenshots of the animation's states.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.browser import page_lint
from tests.conftest import require_or_skip

pytestmark = pytest.mark.browser

SITE = page_lint.DEFAULT_SITE
CHAPTER_1 = "chapters/01_formula.html"
LOCAL_HOST = page_lint.LOCAL_HOST
TIMEOUT_MS = page_lint.TIMEOUT_MS  # a 2-core CI machine running other tests at the same time

# No console error is harmless: the page lint (test_pages.py) fails on any console message.


class Visit:
    """One browser context that records what its pages request and report."""

    def __init__(self, browser, site_url: str):
        self.site_url = site_url
        self.foreign: list[str] = []   # requests to any host but 127.0.0.1 (aborted)
        self.failed: list[str] = []    # local responses with status >= 400
        self.errors: list[str] = []    # console errors and uncaught exceptions, not harmless
        self.context = browser.new_context(viewport={"width": 1200, "height": 900},
                                           service_workers="block")
        self.context.set_default_timeout(TIMEOUT_MS)
        self.context.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        if urlsplit(url).hostname == LOCAL_HOST:
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort()

    def open(self, path: str):
        page = self.context.new_page()
        page.on("console", lambda m: m.type == "error"
                and self.errors.append(f"{path}: console error: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(f"{path}: uncaught: {e}"))
        page.on("response", lambda r: r.status >= 400 and self.failed.append(f"{r.status} {r.url}"))
        page.on("websocket", lambda ws: urlsplit(ws.url).hostname != LOCAL_HOST
                and self.foreign.append(ws.url))
        response = page.goto(self.site_url + path, wait_until="load")
        assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
        page.wait_for_load_state("networkidle")
        return page

    def close(self):
        self.context.close()

    def assert_offline_and_clean(self):
        problems = ([f"request to another host: {u}" for u in self.foreign]
                    + [f"failed local request: {f}" for f in self.failed] + self.errors)
        assert not problems, "\n".join(problems)


@pytest.fixture
def visit(browser, site_url):
    v = Visit(browser, site_url)
    yield v
    v.close()


def _pages() -> list[str]:
    return page_lint.site_pages(SITE)


# -- every page -------------------------------------------------------------------------------

RENDERED_STATE_JS = """() => {
  const math = [...document.querySelectorAll('.math')];
  const widgetViews = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]');
  return {
    math: math.length,
    mathUnrendered: math.filter(m => !m.querySelector('mjx-container')).length,
    widgetViews: widgetViews.length,
    widgetsRendered: document.querySelectorAll('.jupyter-widgets.widget-box, .jupyter-widgets.widget-inline-hbox').length,
  };
}"""


def test_every_page_loads_offline_without_errors(visit):
    pages = _pages()
    assert "index.html" in pages and CHAPTER_1 in pages, f"pages found: {pages}"
    rendered = {}
    for path in pages:
        page = visit.open(path)
        # MathJax 3 from the site itself must typeset every formula; widgets must draw
        problem = page_lint.wait_until_rendered(page)
        if problem:  # reported with the requests below
            visit.errors.append(f"{path}: math or widgets never rendered ({problem})")
        rendered[path] = page.evaluate(RENDERED_STATE_JS)
        page.close()
    visit.assert_offline_and_clean()
    # some page of the book has math and some has widgets, so both paths above were exercised
    assert any(r["math"] for r in rendered.values()), "no page has math: the MathJax check ran on nothing"
    assert rendered[CHAPTER_1]["widgetViews"] > 0, f"{CHAPTER_1} embeds no widget view"


# -- chapter 1's animation --------------------------------------------------------------------

VISIBLE_STEPS_JS = """(stepper) => [...stepper.querySelectorAll('.fusedrms-frame')]
  .filter(f => f.getClientRects().length > 0 && getComputedStyle(f).visibility !== 'hidden')
  .map(f => Number(f.dataset.step))"""


def _visible_step(stepper) -> int:
    steps = stepper.evaluate(VISIBLE_STEPS_JS)
    assert len(steps) == 1, f"expected exactly one visible frame, saw steps {steps}"
    return steps[0]


STEP_REACHED_JS = """([el, op, n]) => {
  const s = [...el.querySelectorAll('.fusedrms-frame')]
    .filter(f => f.getClientRects().length > 0 && getComputedStyle(f).visibility !== 'hidden')
    .map(f => Number(f.dataset.step));
  return s.length === 1 && (op === '==' ? s[0] === n : s[0] >= n);
}"""


def _wait_for_step(page, stepper, op: str, n: int, what: str):
    """Wait until the one visible frame's step is == n or >= n; say what showed otherwise."""
    try:
        page.wait_for_function(STEP_REACHED_JS, arg=[stepper.element_handle(), op, n])
    except Exception as e:  # playwright's TimeoutError
        raise AssertionError(f"{what}: visible frame(s) {stepper.evaluate(VISIBLE_STEPS_JS)}") from e


def _screenshot(page, name: str):
    folder = os.environ.get("FUSEDRMS_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=False)


def test_chapter1_animation_steps_with_slider_and_play(visit):
    page = visit.open(CHAPTER_1)
    page.wait_for_selector(".fusedrms-stepper .fusedrms-frame", state="visible")

    # Each embedded stepper is drawn exactly once (local widget JS loaded twice draws it twice).
    views = page.evaluate("""() => [...document.querySelectorAll(
        'script[type="application/vnd.jupyter.widget-view+json"]')]
        .map(s => s.parentElement.querySelectorAll('.fusedrms-stepper').length)""")
    assert views and max(views) <= 1, f"steppers drawn per widget output: {views}"
    assert sum(views) >= 1, "chapter 1 shows no .fusedrms-stepper animation"

    stepper = page.locator(".fusedrms-stepper").first
    stepper.scroll_into_view_if_needed()
    handle = stepper.locator(".widget-slider .noUi-handle").first
    last = int(float(handle.get_attribute("aria-valuemax")))
    assert last >= 2, f"the animation has {last + 1} frames; the test needs at least 3"
    assert _visible_step(stepper) == 0, "the animation must start at its first frame"
    _screenshot(page, "stepper-0-initial")

    # Keyboard on the slider: one step right, the frame follows (jslink slider -> Stack).
    heights = {0: stepper.bounding_box()["height"]}
    handle.focus()
    page.keyboard.press("ArrowRight")
    _wait_for_step(page, stepper, "==", 1, "ArrowRight on the slider did not show frame 2")
    heights[1] = stepper.bounding_box()["height"]
    assert stepper.locator(".widget-readout").first.inner_text().strip() == "1"
    page.keyboard.press("ArrowLeft")
    _wait_for_step(page, stepper, "==", 0, "ArrowLeft on the slider did not go back to frame 1")
    page.keyboard.press("End")
    _wait_for_step(page, stepper, "==", last, "End on the slider did not show the last frame")
    heights[last] = stepper.bounding_box()["height"]
    # one height for every frame: the page below does not jump while Play runs
    assert max(heights.values()) - min(heights.values()) <= 1, f"stepper heights by step: {heights}"
    _screenshot(page, "stepper-1-slider-end")
    page.keyboard.press("Home")
    _wait_for_step(page, stepper, "==", 0, "Home on the slider did not show the first frame")

    # Play: the frame advances on its own (jslink Play -> slider -> Stack), past frame 2.
    play_button = stepper.locator(".widget-play button").first
    assert play_button.is_visible()
    play_button.click()
    _wait_for_step(page, stepper, ">=", 2, "Play did not advance the animation")
    _screenshot(page, "stepper-2-after-play")
    stepper.locator(".widget-play button").nth(1).click()  # stop, so the page goes quiet
    visit.assert_offline_and_clean()


# -- solutions --------------------------------------------------------------------------------

def test_solution_dropdown_opens_on_click(visit):
    page = visit.open(CHAPTER_1)
    page.wait_for_selector(".admonition.dropdown .toggle-button, details.dropdown summary",
                           state="attached")
    dropdown = page.locator(".admonition.dropdown, details.dropdown").first
    dropdown.scroll_into_view_if_needed()
    body = dropdown.locator(":scope > :not(.admonition-title):not(summary):not(button)").first
    assert not body.is_visible(), "a solution must start collapsed"
    toggle = dropdown.locator(".admonition-title, summary").first
    toggle.click()
    body.wait_for(state="visible")
    _screenshot(page, "solution-open")
    toggle.click()
    body.wait_for(state="hidden")
    visit.assert_offline_and_clean()


def test_widget_state_is_embedded_and_no_cdn_is_referenced():
    """The static HTML itself: widget state embedded, every script and stylesheet local."""
    require_or_skip("FUSEDRMS_REQUIRE_BROWSER", (SITE / CHAPTER_1).is_file(),
                    f"no built chapter 1 at {SITE / CHAPTER_1}: run `make book` first")
    import re

    html = (SITE / CHAPTER_1).read_text(encoding="utf-8")
    state = re.search(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>',
                      html, re.S)
    assert state, "chapter 1 embeds no widget state (was the notebook executed?)"
    assert json.loads(state.group(1))["version_major"] == 2
    tag_re = re.compile(r"<(script|link)\b[^>]*>", re.S)
    url_re = re.compile(r'\b(?:src|href)="((?:[a-z]+:)?//[^"]+)"')
    fetched_rel = re.compile(r'\brel="[^"]*\b(stylesheet|preload|modulepreload|icon|prefetch|manifest)\b')
    for page in _pages():
        remote = []
        for tag in tag_re.finditer((SITE / page).read_text(encoding="utf-8")):
            text = tag.group(0)
            if tag.group(1) == "link" and not fetched_rel.search(text):
                continue  # rel="canonical", "next", ...: navigation, not fetched by the page
            remote += [u for u in url_re.findall(text) if urlsplit(u).hostname != LOCAL_HOST]
        assert not remote, f"{page} loads from another host: {remote}"


# -- controls that need a kernel --------------------------------------------------------------

def test_live_only_controls_are_disabled_under_one_line_saying_so(visit):
    page = visit.open(CHAPTER_1)
    page.wait_for_selector(".fusedrms-live-only input", state="attached")
    note = page.locator(".fusedrms-static-note").first
    assert note.is_visible() and note.inner_text().strip() == "Run the notebook to change the inputs."
    page.wait_for_function("() => [...document.querySelectorAll('.fusedrms-live-only input')]"
                           ".every(i => i.disabled)")
    states = page.evaluate("""() => [...document.querySelectorAll('.fusedrms-live-only')]
        .map(b => ({inert: b.hasAttribute('inert'), opacity: getComputedStyle(b).opacity}))""")
    assert states and all(s["inert"] and float(s["opacity"]) < 1 for s in states), states
    visit.assert_offline_and_clean()
