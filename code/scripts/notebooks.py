"""Keep chapter notebooks clean, and store the outputs that nbval checks.

    python code/scripts/notebooks.py clean   chapters/*.ipynb   # strip outputs (keep checked cells')
    python code/scripts/notebooks.py refresh chapters/01_formula.ipynb   # re-execute, store checked outputs
    python code/scripts/notebooks.py check   chapters/*.ipynb   # exit 1 if any notebook is not clean

"Clean" means: no widget state, and no outputs or execution counts except in cells whose first
line is ``# NBVAL_CHECK_OUTPUT`` (nbval compares those against the stored output, and needs the
execution count to know the cell was run).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

MARKER = "# NBVAL_CHECK_OUTPUT"


def is_checked(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(MARKER)


def clean(nb) -> bool:
    """Strip what should not be committed; return True if anything changed."""
    changed = False
    for cell in nb.cells:
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
    parser.add_argument("action", choices=["clean", "refresh", "check"])
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    dirty = []
    for path in args.notebooks:
        if args.action == "refresh":
            refresh(path)
            print(f"refreshed {path}")
            continue
        nb = nbformat.read(path, as_version=4)
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
