"""Keep chapter notebooks clean, and store the outputs that nbval checks.

    python code/scripts/notebooks.py clean   chapters/*.ipynb   # strip outputs (keep checked cells')
    python code/scripts/notebooks.py refresh chapters/01_formula.ipynb   # re-execute, store checked outputs
    python code/scripts/notebooks.py check   chapters/*.ipynb   # exit 1 if any notebook is not clean
    python code/scripts/notebooks.py tags    chapters/*.ipynb   # "# NBVAL_CHECK_OUTPUT" lines -> tag

"Clean" means: no widget state, no inline values a run left in markdown cells (jupyterlab-myst's
``user_expressions``), and no outputs or execution counts except in checked cells: cells
tagged ``nbval-check-output`` (nbval compares those against the stored output, and needs the
execution count to know the cell was run). The older marker, a first line
``# NBVAL_CHECK_OUTPUT``, still counts; ``tags`` moves it into the tag, where readers never see it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

MARKER = "# NBVAL_CHECK_OUTPUT"
CHECK_TAG = "nbval-check-output"  # nbval reads the same option from this cell tag


def is_checked(cell) -> bool:
    if cell.cell_type != "code":
        return False
    return CHECK_TAG in cell.metadata.get("tags", []) or cell.source.lstrip().startswith(MARKER)


def move_markers_to_tags(nb) -> int:
    """Replace each checked cell's ``# NBVAL_CHECK_OUTPUT`` first line by the tag; return how many."""
    moved = 0
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.source.lstrip().startswith(MARKER):
            continue
        first, _, rest = cell.source.lstrip().partition("\n")
        if first.strip() != MARKER:
            continue  # e.g. "# NBVAL_CHECK_OUTPUT_X": not the marker, leave it alone
        cell.source = rest
        tags = cell.metadata.setdefault("tags", [])
        if CHECK_TAG not in tags:
            tags.append(CHECK_TAG)
        moved += 1
    return moved


def clean(nb) -> bool:
    """Strip what should not be committed; return True if anything changed."""
    changed = False
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "user_expressions" in cell.metadata:
            del cell.metadata["user_expressions"]  # jupyterlab-myst's {eval} values of one run
            changed = True
        if cell.cell_type != "code":
            continue
        if is_checked(cell):
            # nbval skips ("unrun") a stored cell without an execution count: keep it
            if cell.outputs and cell.get("execution_count") is None:
                cell.execution_count = 1
                changed = True
        else:
            if cell.get("execution_count") is not None:
                cell.execution_count = None
                changed = True
            if cell.outputs:
                cell.outputs = []
                changed = True
        if "execution" in cell.metadata:
            del cell.metadata["execution"]
            changed = True
    if "widgets" in nb.metadata:
        del nb.metadata["widgets"]
        changed = True
    return changed


def refresh(path: Path, timeout: int = 900) -> None:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    clean(nb)
    nbformat.write(nb, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["clean", "refresh", "check", "tags"])
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    dirty = []
    for path in args.notebooks:
        if args.action == "refresh":
            refresh(path)
            print(f"refreshed {path}")
            continue
        nb = nbformat.read(path, as_version=4)
        if args.action == "tags":
            moved = move_markers_to_tags(nb)
            if moved:
                nbformat.write(nb, path)
            print(f"{path}: {moved} cell(s) now tagged {CHECK_TAG}")
            continue
        if clean(nb):
            if args.action == "clean":
                nbformat.write(nb, path)
                print(f"cleaned {path}")
            else:
                dirty.append(path)
    for path in dirty:
        print(f"{path} is not clean: run python code/scripts/notebooks.py clean {path}")
    return 1 if dirty else 0


if __name__ == "__main__":
    sys.exit(main())
