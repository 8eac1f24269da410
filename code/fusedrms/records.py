"""Recorded results: every performance number in the book is loaded from a file written here.

A record file is JSON: ``{"provenance": {...}, "records": [{...}, ...]}`` under
``fusedrms/data/<machine>/<name>.json`` (``machine`` like ``"h200"``). The provenance names the GPU,
driver, CUDA/ROCm, torch, triton and Python versions, the date, the git commit and the command.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"


def _git_commit() -> str:
    if os.environ.get("FUSEDRMS_COMMIT"):  # set by the GPU session script (no .git there)
        return os.environ["FUSEDRMS_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=DATA_DIR.parent, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance() -> dict:
    """Who measured: hardware, software versions, date, commit and command line."""
    from . import env

    e = env.current()
    return {
        "gpu": e.gpu_name or "none (CPU)",
        "backend": e.backend,
        "driver": e.versions.get("driver"),
        "cuda": e.versions.get("cuda"),
        "hip": e.versions.get("hip"),
        "torch": e.versions["torch"],
        "triton": e.versions.get("triton"),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
    }


def write(path: str | Path, records: list[dict], extra: dict | None = None) -> Path:
    """Write ``records`` with provenance to ``path`` (JSON)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"provenance": {**provenance(), **(extra or {})}, "records": records}
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path


def load(name: str, machine: str = "h200") -> dict:
    """Load ``data/<machine>/<name>.json``; raises FileNotFoundError naming the file if missing."""
    path = DATA_DIR / machine / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"no recorded results at {path}; they are written by the GPU "
                                f"session script (code/scripts/gpu_session.sh)")
    return json.loads(path.read_text())


def describe(doc: dict) -> str:
    """One line naming where and when a record file was measured."""
    p = doc["provenance"]
    runtime = f"CUDA {p['cuda']}" if p.get("cuda") else (f"HIP {p['hip']}" if p.get("hip") else "")
    return (f"Recorded on {p['gpu']} (driver {p.get('driver')}, {runtime}), torch {p['torch']}, "
            f"triton {p['triton']}, Python {p['python']}, {p['date'][:10]}, "
            f"commit {str(p['commit'])[:10]}")
