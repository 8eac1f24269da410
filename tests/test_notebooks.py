"""Chapter notebooks: committed clean, and each starts by saying what runs where."""
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
    assert not notebooks.clean(nb), (f"{path.name} has outputs outside # NBVAL_CHECK_OUTPUT cells: "
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
                f"{path.name}: a # NBVAL_CHECK_OUTPUT cell has no stored output: run "
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
