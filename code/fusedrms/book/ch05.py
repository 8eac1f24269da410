"""Chapter 5's companion: the verification suite on the GPU, over every registered kernel and every
launch configuration in use.

``record(out_dir)`` writes ``verify_gpu.json`` (every registered kernel x dtype x boundary case;
``python -m fusedrms.verify --kernel all --device gpu``), ``verify_broken_gpu.json`` +
``verify_broken_gpu.txt`` (the same suite on :mod:`fusedrms.book.broken`'s kernels: each must fail)
and ``verify_configs_gpu.json`` (each entry of the tuning tables this GPU uses, run through the
wrappers at its own width: the capstone's two-pass kernel at the tuned widths included, and the FP8
kernel's tuned configuration bit for bit).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from .. import env, records, tuning
from . import broken, ch07

FILES = {
    "verify_gpu.json": "the boundary suite, every registered kernel x dtype x case",
    "verify_broken_gpu.json": "the suite on the deliberately broken kernels (they must fail)",
    "verify_broken_gpu.txt": "its printed report",
    "verify_configs_gpu.json": "every tuned configuration in use, through the wrappers at its width",
}
ESTIMATE_S = 150
SOURCES = ("verify.py", "checks.py", "reference.py", "registry.py", "kernels/rmsnorm.py",
           "kernels/add_rmsnorm.py", "kernels/rmsnorm_fp8.py", "kernels/rounding.py",
           "kernels/peers.py", "kernels/hip/rmsnorm.hip", "kernels/hip/kernels.py",
           "book/broken.py", "book/ch05.py::record", "tuning/h200/capstone.json", "tuning/h200/fp8.json")
FP8_ROWS = (1, 3, 64)


def _verify(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    """The suite in its own process, as a reader runs it (a crash there cannot end the recording)."""
    return subprocess.run([sys.executable, "-m", "fusedrms.verify", *args], capture_output=True,
                          text=True, timeout=timeout)


def fp8_configs_in_use(results: list, log=print, rows_list=FP8_ROWS) -> bool:
    """Every tuned FP8 entry for this GPU, bit for bit against the reference at its width."""
    from ..kernels import rmsnorm_fp8 as Q

    ok_all = True
    for cols, cfg in sorted(tuning.active("fp8")["configs"].items()):
        for rows in rows_list:
            x, w = Q.make_inputs(rows, cols, seed=rows)
            report = Q.compare(*Q.rmsnorm_fp8_fused(x, w, config=cfg), *Q.reference(x, w))
            results.append({"kind": "fp8_config", "cols": cols, "config": cfg.label, "rows": rows,
                            "ok": bool(report.ok), "message": str(report)[:300]})
            ok_all &= bool(report.ok)
            log(f"fp8 {rows}x{cols} ({cfg.label}): {'ok' if report.ok else 'FAILED'}")
    return ok_all


SMOKE_KERNELS = "triton.row,capstone.fused,fp8.fused"


def record(out_dir, tune: bool = False, log=print, smoke: bool = False) -> list[Path]:
    """``smoke``: three kernels, two broken ones, one row count per tuned configuration."""
    env.require_gpu("recording chapter 5")
    out_dir = Path(out_dir)
    problems = []
    suite = _verify(["--kernel", SMOKE_KERNELS if smoke else "all", "--device", "gpu", "--json",
                     str(out_dir / "verify_gpu.json")], 420)
    log(suite.stdout[-4000:] + suite.stderr[-2000:])
    if suite.returncode != 0:
        problems.append(f"the suite failed (exit {suite.returncode})")
    caught = broken.CAUGHT[:2] if smoke else broken.CAUGHT
    neg = _verify(["--kernel", ",".join(caught) if smoke else "broken.*", "--device", "gpu", "--json",
                   str(out_dir / "verify_broken_gpu.json")], 240)
    (out_dir / "verify_broken_gpu.txt").write_text(neg.stdout + neg.stderr)
    try:
        doc = json.loads((out_dir / "verify_broken_gpu.json").read_text())
        failed = {r["kernel"] for r in doc["records"] if r["status"] == "FAIL"}
        missed = [name for name in caught if name not in failed]
        if missed:
            problems.append(f"broken kernels that passed: {', '.join(missed)}")
    except (OSError, ValueError, KeyError) as e:
        problems.append(f"no negative-test results ({type(e).__name__}: {e})")
    results = []
    capstone_ok = ch07.check_table(out_dir, 120, every_entry=True, results=results,
                                   shapes=ch07.CHECK_SHAPES[:1] if smoke else ch07.CHECK_SHAPES)
    fp8_ok = fp8_configs_in_use(results, log, FP8_ROWS[:1] if smoke else FP8_ROWS)
    records.write(out_dir / "verify_configs_gpu.json", results,
                  extra={"tables": {k: tuning.active(k)["path"] for k in tuning.KINDS}})
    if not (capstone_ok and fp8_ok):
        problems.append("a tuned configuration in use failed its check")
    torch.cuda.empty_cache()
    if problems:
        raise RuntimeError("; ".join(problems))
    return [out_dir / f for f in FILES]
