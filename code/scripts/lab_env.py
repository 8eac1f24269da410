"""The Python half of `make lab`'s install step (code/scripts/bootstrap_lab.sh), run by .venv's Python.

    python code/scripts/lab_env.py undo BEFORE      # put the packages back as listed in BEFORE
    python code/scripts/lab_env.py kernel-spec KERNEL_JSON
    python code/scripts/lab_env.py versions

``undo``: BEFORE is ``pip list --format=freeze`` taken before the install; packages added since are
uninstalled and packages whose version changed are reinstalled at their old version.
``kernel-spec``: the registered kernel runs ``python``, which Jupyter replaces with its own
interpreter (.venv's), so the spec stays right when the clone moves.
"""
from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
SHOWN = ("jupyterlab", "notebook", "ipywidgets", "jupyterlab_widgets", "jupyterlab_myst",
         "ipykernel")


def _listed(lines) -> dict[str, str]:
    pairs = (line.strip().split("==", 1) for line in lines if "==" in line)
    return {name.lower().replace("_", "-"): version for name, version in pairs}


def undo(before_file: str) -> None:
    before = _listed(Path(before_file).read_text().splitlines())
    now = subprocess.run(PIP + ["list", "--format=freeze"], capture_output=True, text=True)
    after = _listed(now.stdout.splitlines())
    added = [n for n in after if n not in before]
    changed = [f"{n}=={before[n]}" for n in after if n in before and after[n] != before[n]]
    if added:
        subprocess.run(PIP + ["uninstall", "-q", "-y", *added], check=False)
    if changed:
        subprocess.run(PIP + ["install", "-q", "--no-deps", *changed], check=False)


def kernel_spec(path: str) -> None:
    spec = json.loads(Path(path).read_text())
    spec["argv"][0] = "python"
    Path(path).write_text(json.dumps(spec, indent=1) + "\n")


def versions() -> None:
    print("[lab] " + ", ".join(f"{p} {importlib.metadata.version(p)}" for p in SHOWN))


if __name__ == "__main__":
    command, *args = sys.argv[1:] or ["help"]
    actions = {"undo": undo, "kernel-spec": kernel_spec, "versions": versions}
    if command not in actions:
        sys.exit(__doc__)
    actions[command](*args)
