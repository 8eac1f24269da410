"""Chapter notebooks: committed clean, each starts by saying what runs where, and every floor is
the one copy bandwidth the recording measured."""
import ast
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "code" / "scripts"))
import notebooks  # noqa: E402


def test_there_are_chapters():
    assert CHAPTERS, "no notebooks under chapters/"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_committed_clean(path):
    nb = nbformat.read(path, as_version=4)
    assert not notebooks.clean(nb), (f"{path.name} has outputs outside checked cells: "
                                     f"run python code/scripts/notebooks.py clean {path}")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_first_code_cell_sets_up_the_environment(path):
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "env.setup()" in first.source, f"{path.name}: first code cell must call env.setup()"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_checked_cells_have_stored_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if notebooks.is_checked(cell):
            assert cell.outputs and cell.execution_count is not None, (
                f"{path.name}: a checked cell (tag nbval-check-output) has no stored output: run "
                f"python code/scripts/notebooks.py refresh {path}")


def test_clean_strips_unchecked_outputs_and_keeps_checked():
    nb = nbformat.v4.new_notebook()
    plain = nbformat.v4.new_code_cell("print(1)", execution_count=3,
                                      outputs=[nbformat.v4.new_output("stream", text="1\n")])
    checked = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(2)", execution_count=4,
                                        outputs=[nbformat.v4.new_output("stream", text="2\n")])
    nb.cells = [plain, checked]
    nb.metadata["widgets"] = {"state": {}}
    assert notebooks.clean(nb)
    assert plain.outputs == [] and plain.execution_count is None
    assert checked.outputs and checked.execution_count == 4
    assert "widgets" not in nb.metadata
    assert not notebooks.clean(nb)


def test_clean_strips_the_inline_values_a_run_left_in_markdown():
    prose = nbformat.v4.new_markdown_cell("Speed {eval}`speed`.")
    prose.metadata["user_expressions"] = [{"expression": "speed", "result": {
        "status": "ok", "data": {"text/plain": "2.5"}, "metadata": {}}}]
    nb = nbformat.v4.new_notebook()
    nb.cells = [prose]
    assert notebooks.clean(nb)
    assert prose.metadata == {} and not notebooks.clean(nb)


def test_tag_marks_a_checked_cell_like_the_comment():
    tagged = nbformat.v4.new_code_cell("print(2)", execution_count=4,
                                       outputs=[nbformat.v4.new_output("stream", text="2\n")])
    tagged.metadata["tags"] = [notebooks.CHECK_TAG]
    nb = nbformat.v4.new_notebook()
    nb.cells = [tagged, nbformat.v4.new_markdown_cell("# NBVAL_CHECK_OUTPUT in prose")]
    assert notebooks.is_checked(tagged) and not notebooks.is_checked(nb.cells[1])
    assert not notebooks.clean(nb)  # its output stays


def test_tags_moves_the_marker_line_into_the_tag(tmp_path):
    nb = nbformat.v4.new_notebook()
    marked = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(2)", execution_count=1,
                                       outputs=[nbformat.v4.new_output("stream", text="2\n")])
    other = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT_LATER\nprint(3)")
    nb.cells = [marked, other]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert notebooks.main(["tags", str(path)]) == 0
    back = nbformat.read(path, as_version=4)
    assert back.cells[0].source == "print(2)"
    assert back.cells[0].metadata["tags"] == [notebooks.CHECK_TAG]
    assert back.cells[0].outputs and notebooks.is_checked(back.cells[0])
    assert back.cells[1].source.startswith("# NBVAL_CHECK_OUTPUT_LATER")
    assert notebooks.main(["tags", str(path)]) == 0  # a second run changes nothing
    assert nbformat.read(path, as_version=4).cells[0].metadata["tags"] == [notebooks.CHECK_TAG]


# The data sheet's bandwidth is no floor. A chapter names it only where it says why: chapter 2's
# published table and the ridge points read from it, and chapter 8's reproduction of tilefoundry's
# ideal times, which assume it. Everything else is priced at records.copy_floor(), and no page
# reads the copy a recorded file measured for itself (its copy_GBps).
DATA_SHEET = re.compile(r"traffic\.PUBLISHED|published_for|reader_bandwidth_GBps|reader_ceilings"
                        r"|\b4,?800(\.0)?\b|\b4\.8 ?TB/s")
OWN_COPY = re.compile(r"copy_GBps")
DATA_SHEET_ALLOWED = {  # notebook -> text that marks a cell allowed to name the data sheet
    "02_fusion_boundary.ipynb": ('page.glue("lowest_ridge"', 'caption="Published memory bandwidth'),
    "08_fp8_quant.ipynb": ("THEIR_GBPS = traffic.PUBLISHED",),
}


def _texts(cell):
    """A cell's source and, for a checked cell, the text of its stored outputs."""
    yield cell.source
    for out in cell.get("outputs", []):
        yield out.get("text", "")
        for mime in ("text/plain", "text/html", "text/markdown"):
            yield "".join(out.get("data", {}).get(mime, ""))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_chapter_prices_at_the_data_sheet(path):
    nb = nbformat.read(path, as_version=4)
    allowed = DATA_SHEET_ALLOWED.get(path.name, ())
    for i, cell in enumerate(nb.cells):
        if any(marker in cell.source for marker in allowed):
            continue
        for text in _texts(cell):
            hit = DATA_SHEET.search(text)
            assert not hit, (f"{path.name}, cell {i}: {hit.group(0)!r} prices at the data sheet; "
                             f"price at records.copy_floor() (chapter 2's measured copy)")
            if cell.cell_type == "code":
                assert not OWN_COPY.search(text), (
                    f"{path.name}, cell {i} reads a file's own copy bandwidth; use "
                    f"records.copy_floor(beside=doc) or records.at_copy_floor(doc)")


def test_the_data_sheet_lint_catches_what_it_is_for():
    for text in ("bw = traffic.PUBLISHED[traffic.H200][0]", "at 4,800 GB/s", "at 4.8 TB/s",
                 "bandwidth_GBps=4800.0", "--bandwidth 4800", "traffic.reader_ceilings()"):
        assert DATA_SHEET.search(text), text
    for text in ("4,236 GB/s", "48.0 µs", "14800 rows", "copy floor at 4236"):
        assert not DATA_SHEET.search(text), text


def test_the_command_line_example_passes_the_recorded_copy():
    from fusedrms import records

    text = nbformat.read(ROOT / "chapters" / "02_fusion_boundary.ipynb", as_version=4)
    given = re.findall(r"--bandwidth (\d+)", "\n".join(c.source for c in text.cells))
    assert given == [str(round(records.copy_floor_GBps(records.COMMITTED)))]


def _library_aliases(tree) -> dict:
    """Names a notebook binds to fusedrms modules (``from fusedrms.measure import harness``)."""
    import importlib

    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("fusedrms") and a.asname:
                    out[a.asname] = importlib.import_module(a.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fusedrms"):
            for a in node.names:
                try:
                    out[a.asname or a.name] = importlib.import_module(f"{node.module}.{a.name}")
                except ImportError:  # a function or class, not a module
                    pass
    return out


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_library_call_uses_keywords_the_library_has(path):
    """Cells that run only on a GPU never run in CI: a keyword the library no longer takes would
    fail first on a reader's GPU. Every ``module.name(keyword=...)`` is bound to its signature."""
    import inspect

    source = "\n".join(
        "\n".join(line for line in "".join(c["source"]).splitlines() if not line.startswith(("%", "!")))
        for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    tree = ast.parse(source)
    aliases = _library_aliases(tree)
    wrong = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in aliases):
            continue
        target = getattr(aliases[node.func.value.id], node.func.attr, None)
        keywords = {k.arg: None for k in node.keywords if k.arg}
        if target is None or not callable(target) or not keywords:
            continue
        try:
            inspect.signature(target).bind_partial(**keywords)
        except TypeError as e:
            wrong.append(f"line {node.lineno}: {node.func.value.id}.{node.func.attr}: {e}")
        except ValueError:  # no signature to read (a builtin)
            pass
    assert not wrong, f"{path.name}: " + "; ".join(wrong)


LISTING_COLUMNS = 80  # a listing wider than this wraps mid-line on the page
GENERATED_LISTINGS = {  # listings made while the chapter runs, not a region of our sources
    ("07_capstone.ipynb", "inductor[inductor.index('@triton.jit'):]"),
}


def _listings(path):
    """``(argument as written, the text show_listing puts on the page)`` for every show_listing
    call in a notebook's code (None for an argument that is not a region of the package)."""
    from fusedrms.viz.source import listing_text

    source = "\n".join(
        "\n".join(line for line in "".join(c["source"]).splitlines() if not line.startswith(("%", "!")))
        for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    tree = ast.parse(source)
    aliases = _library_aliases(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
                == "show_listing"):
            continue
        arg = node.args[0]
        marker = next((ast.literal_eval(k.value) for k in node.keywords if k.arg == "marker"), None)
        if not (isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name)
                and arg.value.id in aliases):
            yield ast.unparse(arg), None
            continue
        yield ast.unparse(arg), listing_text(getattr(aliases[arg.value.id], arg.attr), marker)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_listing_fits_the_page_width(path):
    """Every source region a chapter shows with viz.show_listing has lines of at most
    LISTING_COLUMNS columns, so no listing line wraps on the page."""
    wide = []
    for arg, text in _listings(path):
        if text is None:
            assert (path.name, arg) in GENERATED_LISTINGS, f"{path.name}: cannot resolve {arg}"
            continue
        wide += [f"{arg}: {len(line.expandtabs())} columns: {line.strip()[:60]}"
                 for line in text.splitlines() if len(line.expandtabs()) > LISTING_COLUMNS]
    assert not wide, f"{path.name}: {len(wide)} listing lines wrap:\n" + "\n".join(wide)


def test_the_listing_scan_finds_the_kernels_the_chapters_show():
    found = {(p.name, arg) for p in CHAPTERS for arg, _ in _listings(p)}
    assert ("08_fp8_quant.ipynb", "F.__file__") in found
    assert ("07_capstone.ipynb", "A.launch") in found
    assert GENERATED_LISTINGS <= found  # an exemption that no longer exists is dropped


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_code_a_reader_sees_fits_80_columns(path):
    """The page lint (in the browser) flags code that scrolls sideways; this finds it without one."""
    hidden = {"remove-input", "remove-cell"}
    long = [f"cell {i} line {j + 1}: {len(line)} columns"
            for i, c in enumerate(json.loads(path.read_text())["cells"])
            if c["cell_type"] == "code" and not hidden & set(c.get("metadata", {}).get("tags", []))
            for j, line in enumerate("".join(c["source"]).splitlines()) if len(line) > 80]
    assert not long, f"{path.name}: " + "; ".join(long)


# Claims the recording or the field contradicts, each found once and fixed: a lint keeps them out
# of every chapter's prose and the front matter.
BOOK_PAGES = sorted((ROOT / "book").glob("*.md"))
CONTRADICTED = {
    r"bound on the fp32 reduction": "the fp32 allowance is a statistical estimate: a sum added "
                                    "one term after another exceeds it (chapter 1)",
    r"cannot change the result": "num_warps cannot change what is computed; it can "
                                 "change the last bits (the order of the sum)",
    r"(?<!they run )in lockstep": "NVIDIA warps are not lockstep since Volta (independent thread "
                                  "scheduling)",
    r"read in\s+either\s+order": "chapter 4 builds on chapter 3",
    r"best possible time": "the copy floor is a reference a read-heavy kernel can pass",
    r"\beight barriers\b": "the block kernel's tree over 256 threads waits at nine barriers",
    r"a single warp's work": "the rule gives a 128-column row at least 4 warps",
    r"5% (taken as a tie|above the fastest)": "a tie band is derived from the recording's "
                                              "spread (measure.compare.tie_band), not asserted",
}


def _prose(path):
    """``(where, text)`` for every markdown cell of a chapter, or the whole of a front page."""
    if path.suffix == ".md":
        yield path.name, path.read_text()
        return
    for i, c in enumerate(json.loads(path.read_text())["cells"]):
        # a Lab-only cell (the glossary and references JupyterLab reads) is not on the page
        if c["cell_type"] == "markdown" and "lab-only" not in c["metadata"].get("tags", []):
            yield f"{path.name}, cell {i}", "".join(c["source"])


@pytest.mark.parametrize("path", CHAPTERS + BOOK_PAGES, ids=lambda p: p.name)
def test_no_page_repeats_a_claim_the_data_contradicts(path):
    found = [f"{where}: {hit.group(0)!r} ({why})" for where, text in _prose(path)
             for pattern, why in CONTRADICTED.items()
             for hit in [re.search(pattern, " ".join(text.split()), re.IGNORECASE)] if hit]
    assert not found, "; ".join(found)


def test_the_contradicted_claims_lint_catches_what_it_is_for():
    for text in ("plus a bound on the fp32 reduction's own error",
                 "`num_warps` decides how. It cannot change the result, only the speed",
                 "executes one instruction at a time in lockstep",
                 "Chapters 3 and 4 can be read in\neither order", "the best possible time",
                 "eight rounds and eight barriers", "128 lanes, a single warp's work",
                 "the band is 5% above the fastest"):
        assert any(re.search(p, " ".join(text.split()), re.IGNORECASE) for p in CONTRADICTED), text
    for text in ("nothing guarantees that they run in lockstep", "nine barriers",
                 "num_warps cannot change what is computed; it can change the last bits"):
        assert not any(re.search(p, text, re.IGNORECASE) for p in CONTRADICTED), text


def test_chapter_1_calls_the_fp32_allowance_an_estimate():
    text = " ".join(t for _, t in _prose(ROOT / "chapters" / "01_formula.ipynb"))
    assert "statistical estimate, not a bound" in " ".join(text.split())


# GPU words the front matter promises to introduce where a chapter first needs them: the first
# prose that uses one (chapters in book order) links it to the glossary.
INTRODUCED = {"Register file": r"\bregister(s| file)\b", "Multiprocessor": r"multiprocessor|\bSMs?\b",
              "Coalesced access": r"coalesc", "Warp": r"\bwarps?\b", "Shared memory": r"shared memory",
              "Barrier": r"\bbarriers?\b", "L2": r"\bL2\b", "DRAM": r"\bDRAM\b",
              "Occupancy": r"occupancy", "Wave": r"\bwaves?\b"}


@pytest.mark.parametrize("term", INTRODUCED)
def test_a_gpu_word_is_linked_to_the_glossary_where_it_first_appears(term):
    for path in CHAPTERS:
        for where, text in _prose(path):
            if re.search(INTRODUCED[term], text, re.IGNORECASE):
                links = re.findall(r"\{term\}`([^`]*)`", text)
                assert any(term.lower() in link.lower() for link in links), (
                    f"{where} first uses {term!r} without a {{term}} link to the glossary")
                return
    pytest.fail(f"no chapter uses {term!r}")


# A chapter tells its story in about 2,400 words of prose: the Markdown a reader of the book
# reads, without the JupyterLab-only cells, the dropdown solutions and fenced code.
PROSE_WORDS = 2460


def prose_words(path) -> int:
    nb = nbformat.read(path, as_version=4)
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "markdown" or {"lab-only", "remove-cell"} & set(
                cell.metadata.get("tags", [])):
            continue
        text = re.sub(r"(`{3,})\{admonition\}[^\n]*\n:class: dropdown.*?\n\1", " ", cell.source,
                      flags=re.S)
        text = re.sub(r"(`{3,})[^\n]*\n.*?\n\1", " ", text, flags=re.S)
        text = re.sub(r"\$\$.*?\$\$", " math ", text, flags=re.S)
        count += sum(1 for t in text.split() if re.search(r"[A-Za-z0-9]", t))
    return count


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_chapter_tells_its_story_in_about_2400_words(path):
    assert prose_words(path) <= PROSE_WORDS


def test_the_word_count_skips_solutions_code_and_lab_only_cells(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("one two three\n\n```python\nx = 1\n```"),
                nbformat.v4.new_markdown_cell("```{admonition} Solution\n:class: dropdown\n"
                                              "hidden words here\n```\nfour"),
                nbformat.v4.new_markdown_cell("lab only words")]
    nb.cells[2].metadata["tags"] = ["lab-only", "remove-cell"]
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    assert prose_words(path) == 4


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_your_gpu_panel_shows_only_a_chapter_the_reader_recorded(path):
    """A page falls back to the committed recording file by file: a panel gated on any recording
    of the reader's would show the H200's numbers as theirs."""
    chapter = "ch" + path.name[:2]
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code" and "your_gpu_rows(" in cell.source:
            assert f'records.own_recording_has("{chapter}")' in cell.source, path.name


def _bound_and_read(source: str) -> tuple[set, set]:
    """Names a cell binds (assignments, imports, definitions, arguments) and names it reads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a cell of shell or magic: nothing to check
        return set(), set()
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, read


def names_only_hidden_cells_bind(nb) -> list[tuple[int, list[str]]]:
    """(cell, names) where a cell the page shows reads a name that only removed cells bind: a
    reader who copies the cell gets a NameError."""
    hidden, shown, reads = set(), set(), []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        bound, read = _bound_and_read(cell.source)
        if {"remove-input", "remove-cell"} & set(cell.metadata.get("tags", [])):
            hidden |= bound
        else:
            shown |= bound
            reads.append((i, read))
    return [(i, sorted((read & hidden) - shown)) for i, read in reads if (read & hidden) - shown]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_cell_the_page_shows_binds_or_imports_what_it_reads(path):
    assert names_only_hidden_cells_bind(nbformat.read(path, as_version=4)) == []


def test_the_hidden_name_lint_catches_what_it_is_for():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import torch.nn.functional as F\nk = 3"),
                nbformat.v4.new_code_cell("y = F.relu(k)"), nbformat.v4.new_code_cell("k = 4")]
    nb.cells[0].metadata["tags"] = ["remove-input"]
    assert names_only_hidden_cells_bind(nb) == [(1, ["F"])]  # k: a shown cell binds it too
