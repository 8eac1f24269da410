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

from .. import env, records, tuning, verify
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


# ---------------------------------------------------------------- readers

def suite_summary(doc: dict | None) -> dict | None:
    """A recorded suite run: kernels, checks passed/failed/skipped, the failures, the commit."""
    if not doc:
        return None
    recs = doc["records"]
    failed = [r for r in recs if r["status"] == "FAIL"]
    return dict(kernels=len({r["kernel"] for r in recs}), checks=len(recs),
                passed=sum(r["status"] == "pass" for r in recs), failed=len(failed),
                skipped=sum(r["status"] not in ("pass", "FAIL") for r in recs),
                failures=failed, commit=(doc.get("provenance") or {}).get("commit"),
                complete=(doc.get("provenance") or {}).get("complete", True))


def _as_records(results) -> list[dict]:
    return [r.record() if hasattr(r, "record") else r for r in results]


def matrix_rows(results) -> list[dict]:
    """The suite's matrix as table rows (kernels down, cases across): ``ok``, ``-`` (not
    supported), ``all`` or the dtypes that failed. Takes checks or their records."""
    recs = _as_records(results)
    names = list(dict.fromkeys(r["case"] for r in recs))
    labels = {n: verify.case(n).short if n in verify._CASE_NAMES else n for n in names}
    rows = []
    for k in dict.fromkeys(r["kernel"] for r in recs):
        row = {"kernel": k}
        for n in names:
            ran = [r for r in recs if r["kernel"] == k and r["case"] == n
                   and r["status"] != "skip"]
            bad = [verify.SHORT_DTYPE.get(r["dtype"], r["dtype"]) for r in ran
                   if r["status"] != "pass"]
            row[labels[n]] = ("-" if not ran else "ok" if not bad else
                              "all" if len(bad) == len(ran) > 1 else "/".join(bad))
        rows.append(row)
    return rows


def tolerance_shares(results) -> list[dict]:
    """Worst share of the tolerance (max rel err / rtol) per kernel and dtype, passing checks
    only; FP8 kernels are compared bit for bit and read ``None`` (see ``exact``)."""
    recs = [r for r in _as_records(results) if r["status"] == "pass"]
    rows = []
    for k in dict.fromkeys(r["kernel"] for r in recs):
        mine = [r for r in recs if r["kernel"] == k]
        row = {"kernel": k, "exact": all(r["op"] == "rmsnorm_fp8" for r in mine)}
        for d in ("fp32", "fp16", "bf16"):
            shares = [r["max_rel_err"] / r["rtol"] for r in mine
                      if r["dtype"] == d and r["rtol"] > 0 and r["op"] != "rmsnorm_fp8"]
            row[d] = max(shares) if shares else None
        rows.append(row)
    return rows


def caught(doc: dict | None) -> dict | None:
    """Of a recorded negative-test run: which broken kernels failed at least one check."""
    if not doc:
        return None
    names = sorted({r["kernel"] for r in doc["records"]})
    failing = {r["kernel"] for r in doc["records"] if r["status"] == "FAIL"}
    return {name: name in failing for name in names}


def fp8_cast_mismatch(n: int = 1 << 16, seed: int = 0) -> tuple[int, int] | None:
    """Triton's fp32 -> e4m3 cast on this machine against torch's (after the kernels' clamp to
    +-448): (codes that differ, values), on ``n`` values ``randn * 64``. Chapter 8 measures the
    same thing; under the interpreter about 2 % differ, on a GPU with FP8 conversions none.
    None on a GPU whose Triton cannot convert to e4m3 (before compute capability 8.9, ROCm)."""
    from ..kernels.rmsnorm_fp8 import FP8_DTYPE, code_bits, hardware_fp8_support
    from .ch08 import triton_cast_to_fp8

    if env.current().on_gpu and not hardware_fp8_support()[0]:
        return None

    many = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 64
    cast = triton_cast_to_fp8(many, software=False).cpu()
    want = many.clamp(-448, 448).to(FP8_DTYPE)
    return int((code_bits(cast) != code_bits(want)).sum()), n


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
