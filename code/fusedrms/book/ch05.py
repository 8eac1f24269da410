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
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from .. import env, records, tuning, verify
from . import broken, ch07_tuning

FILES = {
    "verify_gpu.json": "the boundary suite, every registered kernel x dtype x case",
    "verify_broken_gpu.json": "the suite on the deliberately broken kernels (they must fail)",
    "verify_broken_gpu.txt": "its printed report",
    "verify_configs_gpu.json": "every tuned configuration in use, through the wrappers at its width",
}
ESTIMATE_S = 135  # H200 at 347eb14: 134 s (its longest parts: the Triton routes, 63-73 s)
VERIFY_JOBS = max(1, min(12, (os.cpu_count() or 2) - 2))  # a 16-core H200 host: 12
BROKEN_JOBS = max(1, min(4, VERIFY_JOBS // 3))  # six small kernels, beside the suite
SOURCES = ("verify.py", "verify_jobs.py", "checks.py", "reference.py", "registry.py",
           "kernels/rmsnorm.py", "kernels/add_rmsnorm.py", "kernels/add_rmsnorm_chunked.py",
           "kernels/add_rmsnorm_split.py", "kernels/add_rmsnorm_exchange.py",
           "kernels/rmsnorm_fp8.py", "kernels/rmsnorm_fp8_config.py",
           "kernels/rmsnorm_fp8_lean.py", "kernels/direct_launch.py",
           "kernels/rmsnorm_fp8_spec.py", "kernels/rounding.py",
           "kernels/peers.py", "kernels/hip/rmsnorm.hip", "kernels/hip/kernels.py",
           "book/broken.py", "book/ch05.py::record", "book/ch07_tuning.py::check_table",
           "tuning/h200/capstone.json", "tuning/h200/fp8.json")
FP8_ROWS = (1, 3, 64)


def _start_verify(args: list[str]) -> subprocess.Popen:
    """The suite in its own process, as a reader runs it (a crash there cannot end the recording).
    Its output goes to files (a full pipe would stall it while this process works)."""
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, "-m", "fusedrms.verify", *args], stdout=out,
                            stderr=err, text=True)
    proc.output_files = (out, err)
    return proc


def _finish(proc: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    """Wait for a suite started by :func:`_start_verify`; past ``timeout`` it is killed."""
    note = ""
    try:
        proc.wait(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        note = f"\nstopped at its limit of {timeout:.0f} s"
    texts = []
    for f in proc.output_files:
        f.seek(0)
        texts.append(f.read())
        f.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode, texts[0], texts[1] + note)


def fp8_configs_in_use(results: list, log=print, rows_list=FP8_ROWS) -> bool:
    """Every tuned FP8 entry for this GPU, bit for bit against the reference at its width."""
    from ..kernels import rmsnorm_fp8 as Q
    from ..kernels import rmsnorm_fp8_spec as spec

    ok_all = True
    for (cols, contract), cfg in sorted(tuning.active("fp8")["configs"].items()):
        for rows in rows_list:
            x, w = spec.make_inputs(rows, cols, seed=rows)
            report = spec.compare(*Q.rmsnorm_fp8_fused(x, w, config=cfg, contract=contract),
                                  *spec.reference(x, w, contract=contract))
            results.append({"kind": "fp8_config", "cols": cols, "contract": contract,
                            "config": cfg.label, "rows": rows, "ok": bool(report.ok),
                            "message": str(report)[:300]})
            ok_all &= bool(report.ok)
            log(f"fp8 {rows}x{cols}, {contract} contract ({cfg.label}): "
                f"{'ok' if report.ok else 'FAILED'}")
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


# The matrix's cases in two tables (sixteen columns do not fit the text column): what the input
# looks like (shape, layout), then what its values are.
SHAPE_KINDS = ("normal", "strided", "transposed")


def matrix_tables(results, caption: str, max_rows: int = 12):
    """:func:`matrix_rows` as two tables, kernels down in both: the cases of shape and layout
    under ``caption``, then the cases of special values."""
    from . import page

    rows = matrix_rows(results)
    shape = {c.short for c in verify.CASES if c.kind in SHAPE_KINDS}
    cases = [c for c in (rows[0] if rows else {}) if c != "kernel"]
    groups = ([c for c in cases if c in shape], [c for c in cases if c not in shape])
    captions = (f"{caption}. Cases of shape and layout:", "The same kernels, cases of value:")
    return page.Tables(*(page.table([{k: r[k] for k in ["kernel", *cols]} for r in rows],
                                    max_rows=max_rows, caption=cap)
                         for cols, cap in zip(groups, captions) if cols))


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
    from ..kernels.rmsnorm_fp8 import hardware_fp8_support
    from ..kernels.rmsnorm_fp8_spec import FP8_DTYPE, code_bits
    from .ch08 import triton_cast_to_fp8

    if env.current().on_gpu and not hardware_fp8_support()[0]:
        return None

    many = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 64
    cast = triton_cast_to_fp8(many, software=False).cpu()
    want = many.clamp(-448, 448).to(FP8_DTYPE)
    return int((code_bits(cast) != code_bits(want)).sum()), n


MATRIX_KEY = ", ".join(f"{code} = {name}" for name, code in verify.SHORT_DTYPE.items())


def shrunk_cases(cases) -> list[str]:
    """The names of the cases a CPU runs smaller than a GPU (the interpreter is slow)."""
    return [c.name for c in cases if c.shape(False) != c.shape(True)]


def drawer_on_gpu(doc: dict | None, shown) -> dict | None:
    """The recorded negative tests, restricted to the broken kernels the chapter shows (``shown``,
    in its order; the exercise's mystery kernel stays hidden): ``records`` of those kernels,
    ``wrong`` (shown kernels with wrong outputs) and ``caught`` (those of them that failed a
    check), ``silent`` (shown kernels whose outputs are right: only ``broken.unmasked_weight``)
    and whether each silent one passed. None when nothing is recorded."""
    if not doc:
        return None
    recs = [r for r in doc.get("records", []) if r.get("kernel") in shown]
    if not recs:
        return None
    present = [k for k in shown if any(r["kernel"] == k for r in recs)]
    failing = {r["kernel"] for r in recs if r["status"] == "FAIL"}
    wrong_outputs = [k for k in present if k in broken.CAUGHT]
    silent = [k for k in present if k not in broken.CAUGHT]
    return {"records": recs, "kernels": present, "wrong": wrong_outputs,
            "caught": [k for k in wrong_outputs if k in failing],
            "silent": {k: k not in failing for k in silent}}


def matrix_differences(a: list, b: list) -> int:
    """Cells that differ between two :func:`matrix_rows` tables, over the kernels and cases
    both have."""
    other = {r["kernel"]: r for r in b}
    return sum(row[c] != other[row["kernel"]][c] for row in a if row["kernel"] in other
               for c in row if c != "kernel" and c in other[row["kernel"]])


CONFIG_KINDS = {"capstone_config": "of the capstone kernel", "fp8_config": "of the FP8 kernel"}


def kernel_rows(results) -> list[dict]:
    """One row per kernel: checks run, passed, and the cases that failed (``none``); narrower
    than the matrix when almost every cell is ``ok``."""
    recs = _as_records(results)
    out = []
    for k in dict.fromkeys(r["kernel"] for r in recs):
        mine = [r for r in recs if r["kernel"] == k and r["status"] != "skip"]
        bad = list(dict.fromkeys(r["case"] for r in mine if r["status"] != "pass"))
        out.append({"kernel": k, "checks": len(mine),
                    "passed": sum(r["status"] == "pass" for r in mine),
                    "failing cases": ", ".join(bad) or "none"})
    return out


SMOKE_KERNELS = "triton.row,capstone.fused,fp8.fused"


def record(out_dir, tune: bool = False, log=print, smoke: bool = False) -> list[Path]:
    """``smoke``: three kernels, two broken ones, one row count per tuned configuration."""
    env.require_gpu("recording chapter 5")
    out_dir = Path(out_dir)
    problems = []
    # correctness, not timing: the suite, the broken kernels' suite and the checks of the tuned
    # configurations run side by side (their processes share the GPU and the 16 cores)
    start = time.time()
    suite_proc = _start_verify(["--kernel", SMOKE_KERNELS if smoke else "all", "--device", "gpu",
                                "--jobs", str(VERIFY_JOBS), "--json", str(out_dir / "verify_gpu.json")])
    caught = broken.CAUGHT[:2] if smoke else broken.CAUGHT
    neg_proc = _start_verify(["--kernel", ",".join(caught) if smoke else "broken.*", "--device",
                              "gpu", "--jobs", str(BROKEN_JOBS), "--json",
                              str(out_dir / "verify_broken_gpu.json")])
    results = []
    capstone_ok = ch07_tuning.check_table(out_dir, 120, every_entry=True, results=results,
                                          shapes=ch07_tuning.CHECK_SHAPES[:1] if smoke
                                          else ch07_tuning.CHECK_SHAPES)
    fp8_ok = fp8_configs_in_use(results, log, FP8_ROWS[:1] if smoke else FP8_ROWS)
    log(f"tuned configurations checked at +{time.time() - start:.0f} s")
    suite = _finish(suite_proc, 420 - (time.time() - start))
    log(suite.stdout[-4000:] + suite.stderr[-2000:])
    log(f"suite finished at +{time.time() - start:.0f} s")
    if suite.returncode != 0:
        problems.append(f"the suite failed (exit {suite.returncode})")
    neg = _finish(neg_proc, 420 - (time.time() - start))
    log(f"broken kernels' suite finished at +{time.time() - start:.0f} s")
    (out_dir / "verify_broken_gpu.txt").write_text(neg.stdout + neg.stderr)
    try:
        doc = json.loads((out_dir / "verify_broken_gpu.json").read_text())
        failed = {r["kernel"] for r in doc["records"] if r["status"] == "FAIL"}
        missed = [name for name in caught if name not in failed]
        if missed:
            problems.append(f"broken kernels that passed: {', '.join(missed)}")
    except (OSError, ValueError, KeyError) as e:
        problems.append(f"no negative-test results ({type(e).__name__}: {e})")
    records.write(out_dir / "verify_configs_gpu.json", results,
                  extra={"tables": {k: tuning.active(k)["path"] for k in tuning.KINDS}})
    if not (capstone_ok and fp8_ok):
        problems.append("a tuned configuration in use failed its check")
    torch.cuda.empty_cache()
    if problems:
        raise RuntimeError("; ".join(problems))
    return [out_dir / f for f in FILES]
