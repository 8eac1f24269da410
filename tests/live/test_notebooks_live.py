"""The chapters in a live JupyterLab, as a reader runs them: every cell, then the widgets.

One throwaway JupyterLab server for this module (``lab.LabServer``: 127.0.0.1, a free port, a
random token, its own config/runtime/settings folders, copies of the notebooks), driven by Debian's
``chromium`` through Playwright. Chapter 1: Run All, then edit the explorer's x (the frames'
numbers change), type a bad x (a message in the widget), Play and the slider step, an exercise
checked wrong (hint), malformed (message) and right. Chapter 2: Run All, then the calculator's
design, cols, dtype and rows (table and plot recomputed, an impossible input explained). Every
chapter converted by ``code/scripts/lab_ready.py``: Run All, then every ``{eval}`` of its prose
shows the kernel's value, none is left as its bare name, and every ``{term}`` link leads to an
entry. After each step: no kernel error or stderr, no page error, no request to another host.

Skipped locally when chromium or JupyterLab is missing (`make lab` installs JupyterLab); CI sets
FUSEDRMS_REQUIRE_BROWSER=1 to fail instead. xdist's ``--dist loadscope`` keeps the module on one
worker, so one server serves it.
"""
from __future__ import annotations

import importlib.util
import shutil
import signal
import sys
import threading
from pathlib import Path

import nbformat
import pytest

from fusedrms import env, traffic
from tests.conftest import require_or_skip

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "code" / "scripts"))
import lab_ready  # noqa: E402

CHAPTER_1 = ROOT / "chapters" / "01_formula.ipynb"
CHAPTER_2 = ROOT / "chapters" / "02_fusion_boundary.ipynb"
# The chapters whose prose carries {eval} values (converted by code/scripts/lab_ready.py).
CONVERTED = [p for p in sorted((ROOT / "chapters").glob("*.ipynb"))
             if lab_ready.is_converted(nbformat.read(p, as_version=4))]
LAB_CHAPTERS = list(dict.fromkeys([CHAPTER_1, CHAPTER_2, *CONVERTED]))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
ACTION_MS = 30_000     # one click, one recompute (a 2-core CI machine running other tests too)
# Run All of one chapter on a CPU: 15-175 s when a 2-core machine is idle (chapter 5 the longest)
RUN_ALL_MS = 420_000
# hard limit for the whole module (the server is stopped either way): 600 s per two chapters
MODULE_TIMEOUT_S = 300 * len(LAB_CHAPTERS)


def _require_jupyterlab_and_chromium():
    require_or_skip("FUSEDRMS_REQUIRE_BROWSER", importlib.util.find_spec("jupyterlab") is not None,
                    "JupyterLab is not installed: `make lab` installs it (requirements-lab.txt)")
    require_or_skip("FUSEDRMS_REQUIRE_BROWSER", shutil.which("chromium") is not None,
                    "Debian's `chromium` is not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    _require_jupyterlab_and_chromium()
    from tests.live.lab import LabServer

    timer = _hard_timeout(MODULE_TIMEOUT_S)
    server = LabServer(tmp_path_factory.mktemp("lab"), LAB_CHAPTERS)
    try:
        yield server
    finally:
        server.stop()
        timer()


def _hard_timeout(seconds: int):
    """SIGALRM after ``seconds`` fails whatever test is running (the fixture still stops the
    server). Returns the function that cancels it. Only the main thread can take signals."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def expired(signum, frame):
        raise TimeoutError(f"the live-notebook tests ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)

    def cancel():
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return cancel


@pytest.fixture(scope="module")
def browser():
    _require_jupyterlab_and_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _open_and_run(browser, lab, path: Path):
    from tests.live.lab import Notebook

    nb = Notebook(browser, lab, path.name, ACTION_MS)
    nb.run_all(RUN_ALL_MS)
    if path in CONVERTED:  # the prose's values arrive after the code cells ran
        nb.inline_values(_eval_names(path), ACTION_MS)
    _assert_clean(nb)
    return nb


@pytest.fixture(scope="module")
def ran(browser, lab):
    """``ran(path)``: the chapter open in its own browser context after Run All (once each)."""
    opened = {}

    def open_once(path: Path):
        if path not in opened:
            opened[path] = _open_and_run(browser, lab, path)
        return opened[path]
    yield open_once
    for nb in opened.values():
        nb.close()


@pytest.fixture(scope="module")
def chapter1(ran):
    return ran(CHAPTER_1)


@pytest.fixture(scope="module")
def chapter2(ran):
    return ran(CHAPTER_2)


def _assert_clean(nb):
    problems = nb.problems()
    assert not problems, "\n".join(problems)


def _expect():
    from playwright.sync_api import expect

    expect.set_options(timeout=ACTION_MS)  # its default, 5 s, is short for a busy CI machine
    return expect


def test_chapter1_runs_and_says_first_what_runs_where(chapter1):
    first = chapter1.page.locator(".jp-CodeCell").first
    device_line = first.locator(".jp-OutputArea-output").inner_text().strip()
    assert device_line == env.current().describe()  # "no GPU: ..." or "GPU: <name> ..."
    # The solutions stay folded (jupyterlab-myst renders the MyST dropdowns) until clicked.
    solution = chapter1.page.locator("details.dropdown", has_text="Solution").first
    assert solution.get_attribute("open") is None
    assert not solution.locator(".details-body").is_visible()
    chapter1.unfold(solution, ACTION_MS)
    _assert_clean(chapter1)


def test_chapter1_explorer_recomputes_when_the_reader_edits_x(chapter1):
    expect = _expect()
    explorer = chapter1.output_with(".fusedrms-explorer-status")
    # The frame on show; its text is innerText, since each frame also carries its siblings'
    # captions, invisible, to keep one height.
    frame = explorer.locator(".fusedrms-frame:visible")
    status = explorer.locator(".fusedrms-explorer-status")
    x = explorer.get_by_label("x", exact=True)
    expect(frame).to_contain_text("x = [3, 4, -3, -4]", use_inner_text=True)
    before = frame.inner_text()

    x.fill("1, 2, 2, 4")
    x.press("Enter")
    expect(frame).to_contain_text("x = [1, 2, 2, 4]", use_inner_text=True)
    assert frame.inner_text() != before

    # Play steps through the new frames; pausing and the slider's arrow key step too.
    play = explorer.locator(".widget-play button").first
    play.click()
    expect(frame).not_to_have_attribute("data-step", "0")
    play.click()  # pause
    handle = explorer.locator(".noUi-handle")
    for _ in range(7):  # to the mean's step, whatever step the pause stopped at
        if frame.get_attribute("data-step") == "3":
            break
        step = int(frame.get_attribute("data-step"))
        handle.focus()
        handle.press("ArrowLeft" if step > 3 else "ArrowRight")
        expect(frame).not_to_have_attribute("data-step", str(step))
    expect(frame).to_have_attribute("data-step", "3")
    expect(frame).to_contain_text("25 / 4 = 6.25", use_inner_text=True)  # (1+4+4+16) / 4

    # A bad row: the widget says what to write, no frames, no traceback; a good one recovers.
    x.fill("1, two, 2, 4")
    x.press("Enter")
    expect(status).to_contain_text("write numbers separated by commas")
    expect(explorer.locator(".fusedrms-frame")).to_have_count(0)
    x.fill("3, 4, -3, -4")
    x.press("Enter")
    expect(frame).to_contain_text("x = [3, 4, -3, -4]", use_inner_text=True)
    expect(status).to_have_text("")
    _assert_clean(chapter1)


def test_chapter1_exercise_check_renders_its_feedback(chapter1):
    expect = _expect()
    cell = chapter1.code_cell("ch01.sum_of_squares.check(answer)")
    feedback = cell.locator(".jp-OutputArea-output")
    expect(feedback).to_contain_text("Your turn. Run the notebook to check your answer")
    for answer, verdict, detail in [
        ("9", "Not yet.", "Hint: Square the elements, don't just drop the signs."),
        ("'fifty'", "Not yet.", "could not be read"),
        ("25", "Correct.", "1 + 4 + 4 + 16"),
    ]:
        chapter1.edit_and_run(cell, f"answer = {answer}\nch01.sum_of_squares.check(answer)")
        expect(feedback).to_contain_text(detail)
        expect(feedback).to_contain_text(verdict)
    _assert_clean(chapter1)


def test_chapter2_calculator_recomputes_for_the_chosen_design_shape_and_dtype(chapter2):
    expect = _expect()
    calc = chapter2.output_with(".fusedrms-calculator-table")
    table = calc.locator(".fusedrms-calculator-table")
    plot = calc.locator(".fusedrms-calculator-plot img")
    bandwidth = float(calc.get_by_label("GB/s").input_value())
    peak = traffic.reader_ceilings()["peak_tflops"]

    def expect_estimate(step, rows, cols, dtype):
        e = traffic.price(step, rows, cols, dtype, bandwidth, peak)
        expect(table).to_contain_text(f"{e.step}: ")
        expect(table).to_contain_text(f"launches {e.launches}")
        expect(table).to_contain_text(f"ideal {e.ideal_us:,.3f} µs")
        expect(table).to_contain_text(f"total{e.bytes_read:,}{e.bytes_written:,}",
                                      use_inner_text=False)
        expect(plot).to_have_attribute("alt", f"ideal time of {step} by row width")

    expect_estimate("fused_add_rmsnorm", 4096, 4096, "bf16")
    src = plot.get_attribute("src")
    calc.get_by_label("design").select_option("eager_add_rmsnorm")
    expect_estimate("eager_add_rmsnorm", 4096, 4096, "bf16")
    assert plot.get_attribute("src") != src, "the plot follows the design"
    for label, value in (("cols", "7168"), ("rows", "64")):
        src = plot.get_attribute("src")
        box = calc.get_by_label(label, exact=True)
        box.fill(value)
        box.press("Enter")
        expect(plot).not_to_have_attribute("src", src)
    src = plot.get_attribute("src")
    calc.get_by_label("dtype").select_option("fp32")
    expect_estimate("eager_add_rmsnorm", 64, 7168, "fp32")
    expect(plot).not_to_have_attribute("src", src)

    rows = calc.get_by_label("rows", exact=True)
    rows.fill("0")
    rows.press("Enter")
    expect(table).to_contain_text("rows must be at least 1")
    expect(plot).to_have_count(0)
    rows.fill("4096")
    rows.press("Enter")
    expect_estimate("eager_add_rmsnorm", 4096, 7168, "fp32")
    _assert_clean(chapter2)


def _eval_names(path: Path) -> dict[int, list[str]]:
    """The ``{eval}`` names of each markdown cell of ``path``, by cell index."""
    nb = nbformat.read(path, as_version=4)
    return {i: lab_ready.EVAL_ROLE.findall(c.source) for i, c in enumerate(nb.cells)
            if c.cell_type == "markdown" and lab_ready.EVAL_ROLE.search(c.source)}


@pytest.mark.parametrize("path", CONVERTED, ids=lambda p: p.stem)
def test_after_run_all_the_prose_shows_every_value_and_no_placeholder(ran, path):
    names = _eval_names(path)
    assert names, f"{path.name} is converted but its prose has no {{eval}} value"
    wrong = []
    for cell in ran(path).inline_values(names, ACTION_MS):
        where = f"markdown cell {cell['index']}"
        for name in cell["names"]:
            result = cell["results"].get(name)
            if result is None:
                wrong.append(f"{where}: the kernel never answered for {name}")
            elif result["status"] != "ok":
                wrong.append(f"{where}: {name} raised {result.get('ename')}: "
                             f"{result.get('evalue')}")
            elif result["data"]["text/plain"] not in cell["text"]:
                wrong.append(f"{where}: {name} = {result['data']['text/plain']!r} is not shown")
        wrong += [f"{where}: {name} shows as its bare name" for name in cell["placeholders"]]
    assert not wrong, f"{path.name} after Run All:\n" + "\n".join(wrong)
    # {term} links lead to the entries of the chapter's Lab-only glossary; one that jupyterlab-myst
    # cannot resolve links to "#"
    dead = ran(path).page.locator(".jp-MarkdownCell a[href='#']")
    assert dead.count() == 0, [dead.nth(i).inner_text() for i in range(dead.count())]
    _assert_clean(ran(path))
