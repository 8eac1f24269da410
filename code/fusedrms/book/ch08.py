"""Chapter 8's companion: the cast demonstrated in isolation, the GPU recording of RMSNorm + FP8 block quantization and its readers.

``record(out_dir)`` writes ``fp8_quant.json`` (exactness on the GPU, kernel resources, the naive
pair and the fused kernel timed, the warps sweep) and ``fp8_candidates.json`` (every launch
candidate at each tuned width, checked bit for bit and timed in the same run as the naive pair);
with ``tune=True`` it also writes each width's winners to ``tuning/fp8.json`` in the recording
(install it with ``python -m fusedrms.tuning install DIR``). The readers below turn those files into the chapter's
tables and verdicts.
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit

import json
import math
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from .. import checks, records, validation
from .ch08_tuning import (  # the candidates and their tuning table (record runs them)
    best_candidate, candidate_table, candidates_records, write_tuning_table)
from ..kernels.rmsnorm_fp8 import (
    CANDIDATES, baseline_config, choose_config, e4m3_bits, hardware_fp8_support, kernel_resources,
    resolve_rounding, rmsnorm_fp8_fused, rmsnorm_fp8_naive, split_pieces, to_bf16_value,
)
from ..kernels.rmsnorm_fp8_spec import (
    ABSMAX_FLOOR, BF16, FP8_DTYPE, FP8_MAX, FP32, HIDDEN_SIZE, RMS_NORM_EPS, code_bits, compare,
    differing_codes, make_inputs, n_blocks, reference, reference_reordered,
)

# ---------------------------------------------------------------- the cast, in isolation

ELEMENTWISE_BLOCK = 1024  # values per program of the two demonstration kernels below


@triton.jit
def cast_to_fp8_kernel(v_ptr, codes_ptr, n, FP8_MAX: tl.constexpr, BLOCK: tl.constexpr,
                       CLAMP: tl.constexpr, SOFTWARE_ROUNDING: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    if CLAMP:
        v = tl.clamp(v, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
    if SOFTWARE_ROUNDING:
        tl.store(codes_ptr + offsets, e4m3_bits(v), mask=mask)
    else:
        tl.store(codes_ptr + offsets, v.to(tl.float8e4nv, fp_downcast_rounding="rtne"), mask=mask)


@triton.jit
def round_to_bf16_kernel(v_ptr, out_ptr, n, BLOCK: tl.constexpr, SOFTWARE_ROUNDING: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, to_bf16_value(v, SOFTWARE_ROUNDING), mask=mask)


def triton_cast_to_fp8(values, software: bool, clamp: bool = True) -> torch.Tensor:
    """fp32 values -> e4m3 codes through Triton alone (up to 65536 values): Triton's cast
    (``software=False``) or the integer rounding, after clamping to +-448 as the kernels do.
    ``clamp=False`` shows Triton's raw cast (the software path always clamps: it assumes it)."""
    v = torch.as_tensor(values, dtype=FP32).reshape(-1).to(env.current().device)
    if v.numel() > 65536:
        raise validation.InputError("triton_cast_to_fp8 takes at most 65536 values per call.")
    if software and not clamp:
        raise validation.InputError("the software rounding assumes |value| <= 448: keep clamp=True.")
    codes = torch.empty(v.shape, dtype=FP8_DTYPE, device=v.device)
    if v.numel():
        cast_to_fp8_kernel[(triton.cdiv(v.numel(), ELEMENTWISE_BLOCK),)](
            v, codes.view(torch.uint8) if software else codes, v.numel(), FP8_MAX=FP8_MAX,
            BLOCK=ELEMENTWISE_BLOCK, CLAMP=clamp, SOFTWARE_ROUNDING=software)
    return codes


def triton_round_to_bf16(values, software: bool) -> torch.Tensor:
    """fp32 values -> nearest bf16 (as fp32) through Triton: its cast or the integer rounding."""
    v = torch.as_tensor(values, dtype=FP32).reshape(-1).to(env.current().device)
    if v.numel() > 65536:
        raise validation.InputError("triton_round_to_bf16 takes at most 65536 values per call.")
    out = torch.empty_like(v)
    if v.numel():
        round_to_bf16_kernel[(triton.cdiv(v.numel(), ELEMENTWISE_BLOCK),)](
            v, out, v.numel(), BLOCK=ELEMENTWISE_BLOCK, SOFTWARE_ROUNDING=software)
    return out


# ---------------------------------------------------------------- recorded results (GPU)

CHECK_SHAPES = ((1, 1), (3, 127), (3, 129), (5, 200), (7, 1000), (2, 7168), (64, 7168),
                (4, 16384), (4096, 7168))
CHECK_SEEDS = (0, 1, 2)
TIMING_SHAPES = ((2, 7168), (4096, 7168), (16384, 7168), (32768, 7168))
LARGE_ROWS = 4096  # shapes with at least this many rows are "large" for the targets
TARGET_SPEEDUP = 1.5
TARGET_FLOOR_FRACTION = 0.90


def exactness_records(shapes=CHECK_SHAPES, seeds=CHECK_SEEDS, log=print,
                      budget_s: float | None = None) -> list[dict]:
    """Codes and scales of every version against its contract's reference, shape by shape, seed
    by seed: the library's versions the served contract, the untuned baseline and the reordered
    formula the exact one. With ``budget_s``, shapes left when it has passed are recorded as
    skipped."""
    out = []
    t0 = time.time()
    versions = {"fused": lambda x, w: rmsnorm_fp8_fused(x, w),
                "fused_baseline": lambda x, w: rmsnorm_fp8_fused(x, w, config=baseline_config(
                    x.shape[-1]), contract="exact"),
                "naive": lambda x, w: rmsnorm_fp8_naive(x, w),
                "fused_software": lambda x, w: rmsnorm_fp8_fused(x, w, rounding="software"),
                "reordered_reference": lambda x, w: reference_reordered(x, w)}
    against_exact = ("fused_baseline", "reordered_reference")
    for rows, cols in shapes:
        for seed in seeds:
            if budget_s is not None and time.time() - t0 > budget_s:
                out.append({"kind": "skipped", "rows": rows, "cols": cols, "seed": seed,
                            "reason": f"exactness budget of {budget_s:.0f} s spent"})
                log(f"  exact {rows}x{cols} seed {seed}: skipped (budget spent)")
                continue
            x, w = make_inputs(rows, cols, seed)
            refs = {"served": reference(x, w, contract="served"),
                    "exact": reference(x, w, contract="exact")}
            rec = {"kind": "exactness", "rows": rows, "cols": cols, "seed": seed,
                   "codes": rows * cols}
            for name, fn in versions.items():
                try:
                    ref_codes, ref_scales = refs["exact" if name in against_exact else "served"]
                    codes, scales = fn(x, w)
                    report = compare(codes, scales, ref_codes, ref_scales)
                    rec[f"{name}_differing_codes"] = report.mismatches
                    rec[f"{name}_scales_ok"] = bool(checks.allclose(
                        scales.cpu(), ref_scales.cpu(), rtol=1e-6, atol=0.0, nan="match"))
                except Exception as e:  # noqa: BLE001 - recorded, the next version still runs
                    rec[f"{name}_error"] = f"{type(e).__name__}: {e}"
            out.append(rec)
            log(f"  exact {rows}x{cols} seed {seed}: " + ", ".join(
                f"{k.replace('_differing_codes', '')} {v}" for k, v in rec.items()
                if k.endswith("_differing_codes")))
    # the zero block without a floor: NaN codes must sit where the reference puts them
    x, w = make_inputs(4, 512, 0, zero_block=True)
    ref_codes, ref_scales = reference(x, w, absmax_floor=0.0)
    rec = {"kind": "zero_block", "rows": 4, "cols": 512,
           "reference_nan_codes": int((code_bits(ref_codes) & 0x7F == 0x7F).sum()),
           "reference_zero_scales": int((ref_scales == 0).sum())}
    for name, fn in (("fused", rmsnorm_fp8_fused), ("naive", rmsnorm_fp8_naive)):
        try:
            codes, scales = fn(x, w, absmax_floor=0.0)
            rec[f"{name}_differing_codes"] = compare(codes, scales, ref_codes, ref_scales).mismatches
            rec[f"{name}_nan_codes"] = int((code_bits(codes) & 0x7F == 0x7F).sum())
        except Exception as e:  # noqa: BLE001
            rec[f"{name}_error"] = f"{type(e).__name__}: {e}"
    out.append(rec)
    log(f"  zero block (no floor): {rec}")
    # what this torch does with values past 448 without the clamp (saturate or NaN?)
    beyond = torch.tensor([448.0, 464.0, 500.0, 1000.0, math.inf], device=env.current().device)
    out.append({"kind": "torch_cast_beyond_448", "device": str(beyond.device),
                "values": beyond.tolist(),
                "codes": code_bits(beyond.to(FP8_DTYPE)).tolist()})
    log(f"  torch .to(float8_e4m3fn) of {beyond.tolist()}: {out[-1]['codes']}")
    return out


SWEEP_SHAPE = (16384, 7168)
SWEEP_CONFIGS = ((16, True), (16, False), (8, False), (32, False))  # (num_warps, cap_registers)


def sweep_records(shape=SWEEP_SHAPE, configs=SWEEP_CONFIGS, warmup: int = 5, reps: int = 30,
                  log=print) -> list[dict]:
    """The fused kernel's launch configuration at one large shape (the exact contract, whose
    tuning the chapter tells): time, registers, spills."""
    from ..measure import timer

    rows, cols = shape
    x, w = make_inputs(rows, cols, 0)
    out = []
    for num_warps, cap in configs:
        rec = {"kind": "sweep", "rows": rows, "cols": cols, "num_warps": num_warps,
               "cap_registers": cap}
        try:
            rec.update(kernel_resources(num_warps=num_warps, cap_registers=cap, contract="exact"))
            times = sorted(timer.time_gpu(
                lambda: rmsnorm_fp8_fused(x, w, num_warps=num_warps, cap_registers=cap,
                                          contract="exact"),
                warmup, reps, l2="cold", graph=True))
            rec["fused_graph_us"] = float(times[len(times) // 2])
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"
        out.append(rec)
        log(f"  sweep {rows}x{cols}: {rec}")
    return out


FILES = {
    "fp8_quant.json": "exactness on the GPU, kernel resources, naive pair vs fused timed, warps sweep",
    "fp8_candidates.json": "every launch candidate, bit-exactness and times, beside the naive pair",
    "fp8_exactness_cost.json": "the exact kernel beside a diagnostic that drops exactness: time, "
                               "% of floor, SASS opcodes, Nsight Compute pipes",
}
TUNING_FILES = {"tuning/fp8.json": "each width's fastest bit-exact candidate per contract "
                                    "(written with --tune)"}
# H200 at 1cca9b3: 163 s, of which 48 s for the 12 candidates at 16384 and 32768 x 7168; now 15
# candidates, and TUNING_SHAPES' other calls move 0.8x those bytes again (~65 s more)
ESTIMATE_S = 230
# the diagnostic's and the levers' timing, then Nsight Compute on two kernels (~20 s each)
EXACTNESS_COST_S = 150
SOURCES = ("tuning/h200/fp8.json", "kernels/rmsnorm_fp8.py", "kernels/rmsnorm_fp8_config.py",
           "kernels/rmsnorm_fp8_lean.py", "kernels/direct_launch.py",
           "kernels/rmsnorm_fp8_spec.py", "kernels/rmsnorm_fp8_departures.py",
           "kernels/rounding.py", "measure/timer.py", "traffic.py", "book/ch08.py::record",
           "book/ch08_tuning.py", "book/ch08_timing.py", "book/study.py", "book/study_timing.py",
           "book/study_fp8.py")


SMOKE_WIDTHS = {HIDDEN_SIZE: (1024,)}


def record(out_dir, tune: bool = False, log=print, smoke: bool = False, check_shapes=CHECK_SHAPES,
           timing_shapes=TIMING_SHAPES) -> list[Path]:
    """Chapter 8 on the GPU: exactness, then timings, then the candidates with the naive pair
    timed again beside them (one run, one timer). Each part fails on its own and its file is
    rewritten after each part, so a later failure keeps what was measured."""
    from . import ch08_timing

    out_dir = Path(out_dir)
    if smoke:  # the same steps at small shapes, two candidates (one of them the baseline)
        check_shapes, timing_shapes = ((3, 129), (2, 7168)), ((2, 7168), (1024, 7168))
    full = timing_shapes == TIMING_SHAPES  # a rehearsal on small shapes skips the sweep and candidates
    path, cand_path = out_dir / "fp8_quant.json", out_dir / "fp8_candidates.json"
    out = []
    t0 = time.time()
    rounding = resolve_rounding("auto")
    log(f"fp8_quant: rounding 'auto' resolves to {rounding!r} ({hardware_fp8_support()[1]})")
    extra = {"rounding": rounding, "targets": {"speedup": TARGET_SPEEDUP,
                                               "floor_fraction": TARGET_FLOOR_FRACTION,
                                               "large_rows": LARGE_ROWS},
             # what the exact contract's "fused_exact" ran as, and the library's fp8.fused
             "fused_config": choose_config(HIDDEN_SIZE, "exact")[0].label,
             "served_config": choose_config(HIDDEN_SIZE, "served")[0].label,
             "baseline_config": baseline_config(HIDDEN_SIZE).label}
    steps = (("exactness", lambda: exactness_records(check_shapes, log=log)),
             ("resources", lambda: [{"kind": "resources", **kernel_resources(contract="exact")}]),
             ("timing", lambda: ch08_timing.timing_in_processes(
                 timing_shapes, processes=1 if smoke else ch08_timing.TIMING_PROCESSES, log=log)),
             ("sweep", lambda: sweep_records(log=log) if full else []))
    for step, fn in steps:
        try:
            out += fn()
        except Exception as e:  # noqa: BLE001 - recorded; the other steps still run
            out.append({"kind": "error", "step": step, "error": f"{type(e).__name__}: {e}"})
            log(f"  {step} FAILED: {type(e).__name__}: {e}")
        records.write(path, out, extra=extra)
        log(f"fp8_quant: {step} done after {time.time() - t0:.1f} s; wrote {path}")
    written = [path]
    try:
        if smoke:
            cands = candidates_records(CANDIDATES[:2], SMOKE_WIDTHS, warmup=1, reps=3,
                                       log=log)
        else:
            cands = [] if not full else candidates_records(
                log=log, progress=lambda so_far: records.write(cand_path, so_far, extra=extra))
    except Exception as e:  # noqa: BLE001
        cands = [{"kind": "error", "step": "candidates", "error": f"{type(e).__name__}: {e}"}]
        log(f"  candidates FAILED: {type(e).__name__}: {e}")
    winner, served_winner = best_candidate(cands), best_candidate(cands, contract="served")
    extra["candidates_winner"] = winner["label"] if winner else None
    extra["served_candidates_winner"] = served_winner["label"] if served_winner else None
    records.write(cand_path, cands, extra=extra)
    written.append(cand_path)
    cost_missing = []
    try:  # what exactness costs: the diagnostic kernel, SASS, Nsight Compute (not in a rehearsal)
        if full or smoke:
            from . import study

            cost_path = study.fp8_exactness_cost(out_dir, 15.0 if smoke else EXACTNESS_COST_S)
            written.append(cost_path)
            # a report that did not run (its budget spent, ncu failing) fails the recording
            ncu = (json.loads(Path(cost_path).read_text()).get("provenance") or {}).get("ncu") or []
            cost_missing = [f"Nsight Compute on {r.get('target', '?')}: {r.get('status')}"
                            for r in ncu if r.get("status") != "ok" and not smoke]
    except Exception as e:  # noqa: BLE001 - the other files stand
        log(f"  exactness cost FAILED: {type(e).__name__}: {e}")
        cost_missing = [f"exactness cost: {type(e).__name__}: {e}"]
    if tune:
        if write_tuning_table(out_dir / "tuning" / "fp8.json", cands, log=log):
            written.append(out_dir / "tuning" / "fp8.json")
    failed = [f"{r.get('step', r['kind'])}: {r.get('error') or r.get('reason')}"
              for r in out + cands if r.get("kind") in ("error", "skipped")]
    failed += [f"candidate {r['label']}: {r['skipped']}" for r in cands if r.get("skipped")]
    failed += [f"candidate {r['label']}, served: {r['served_error']}" for r in cands
               if r.get("served_error")]
    failed += cost_missing
    if failed:
        from ..measure import harness

        raise harness.Incomplete(f"chapter 8: {len(failed)} step(s) not measured ("
                                 + "; ".join(failed[:6]) + ")")
    return written


# ---------------------------------------------------------------- reading the recorded results

def exactness_table(doc: dict) -> list[dict]:
    """One row per recorded shape x seed: differing codes per version (0 is bit-exact)."""
    return [r for r in doc["records"] if r.get("kind") == "exactness"]


def exactness_summary(doc: dict) -> dict:
    """Totals over all recorded shapes and seeds, per version: checks run, checks exact, codes."""
    rows = exactness_table(doc)
    summary = {}
    for version in ("fused", "fused_baseline", "naive", "fused_software", "reordered_reference"):
        key = f"{version}_differing_codes"
        done = [r for r in rows if key in r]
        summary[version] = {
            "checks": len(done),
            "exact": sum(1 for r in done if r[key] == 0 and r.get(f"{version}_scales_ok", True)),
            "differing_codes": sum(r[key] for r in done),
            "codes": sum(r["codes"] for r in done),
            "errors": sum(1 for r in rows if f"{version}_error" in r),
        }
    return summary


def timing_table(doc: dict) -> list[dict]:
    return [r for r in doc["records"] if r.get("kind") == "timing"]




# ---------------------------------------------------------------- what exactness costs (readers)

EXACTNESS_FLOOR_PCT, DIAGNOSTIC_FLOOR_PCT, MIN_BYTES = 80.0, 85.0, 64 << 20


def _fused_bytes(rows: int, cols: int) -> int:
    """What the fused kernel moves (chapter 2's model): x and gamma in, codes and scales out."""
    from .. import traffic

    return traffic.price("rmsnorm_fp8_fused", rows, cols, "bf16").bytes_total


TRIMMED_FROM_ROUNDS = 5  # from this many rounds on, a spread drops the fastest and the slowest


def round_spread(rounds: list[float]) -> tuple[float, float] | None:
    """The spread of a variant's rounds: from ``TRIMMED_FROM_ROUNDS`` on, the middle ones (so one
    slow window of the GPU does not set every lever's tie band); below that, all of them."""
    if not rounds:
        return None
    kept = sorted(rounds)[1:-1] if len(rounds) >= TRIMMED_FROM_ROUNDS else rounds
    return min(kept), max(kept)


def exactness_cost_rows(doc: dict, floor: records.CopyFloor | None = None) -> list[dict]:
    """The exact fused kernel and the diagnostic one per shape: time, percent of the copy
    ``floor`` (by default the book's, beside ``doc``; None where no copy was measured), codes that
    differ from the specification, bytes moved, and the two floor checks as booleans (None for
    shapes moving less than 64 MB). ``doc``: a recording's ``fp8_exactness_cost.json``."""
    floor = floor or records.copy_floor_beside(doc)
    out = []
    for r in doc["records"]:
        if r.get("status") != "ok":
            continue
        nbytes = _fused_bytes(r["rows"], r["cols"])
        pct = floor.pct(nbytes, r["median_us"]) if floor else None
        exact = r["differing_codes"] == 0
        target = EXACTNESS_FLOOR_PCT if exact else DIAGNOSTIC_FLOOR_PCT
        rounds = r.get("round_us") or []
        out.append({"impl": r["impl"], "rows": r["rows"], "cols": r["cols"], "exact": exact,
                    "differing_codes": r["differing_codes"], "median_us": r["median_us"],
                    "spread_us": round_spread(rounds), "round_count": len(rounds),
                    "own_spec_ok": r.get("own_spec_ok"),
                    "floor_us": floor.us(nbytes) if floor else None, "pct_of_floor": pct,
                    "bytes": nbytes, "reaches_target": (pct >= target)
                    if nbytes >= MIN_BYTES and pct is not None else None, "target_pct": target})
    return out


def instructions_per_element(doc: dict) -> list[dict]:
    """Static SASS instruction counts of each compiled variant, per element a thread holds
    (``BLOCKS * 128`` elements of a padded row over ``num_warps * 32`` threads; the scales'
    shared bytes give BLOCKS), with the opcodes that set the exact kernel apart: fp64 adds
    (the order-free sum), MUFU (reciprocal, sqrt), CALL/BSSY (the correctly rounded division's
    slow path). ``doc``: a recording's ``fp8_exactness_cost.json`` (its provenance's ``sass``)."""
    sass = doc.get("provenance", {}).get("sass") or {}
    out = []
    for kernel, variants in sass.items():
        for v in variants:
            meta = v.get("metadata", {})
            name = meta.get("name", kernel)
            warps, shared = int(meta.get("num_warps", 0)), int(meta.get("shared", 0))
            blocks = _row_blocks(name, shared)
            per_thread = blocks * 128 / (warps * 32) if warps and blocks else None
            ops = v["opcodes"]
            total = sum(ops.values())
            out.append({"kernel": name, "num_warps": warps, "row_blocks": blocks,
                        "registers": v.get("n_regs"),
                        "instructions": total, "elements_per_thread": per_thread,
                        "per_element": total / per_thread if per_thread else None,
                        **{op: ops.get(op, 0) for op in ("DADD", "MUFU", "CALL", "BSSY", "FFMA",
                                                         "LDG", "STG")}})
    return out


def _row_blocks(kernel_name: str, shared: int) -> int | None:
    """128-column blocks a compiled variant holds per row. A padded tile keeps one fp32 per
    block in shared memory (its power-of-two block count); the split tile keeps its largest
    piece's, which identifies the chapter's width (the only one the recording splits) when it
    matches, and nothing otherwise (None: unknown, left out of the counts)."""
    if "split" not in kernel_name:
        return shared // 4 or None
    pieces = split_pieces(n_blocks(HIDDEN_SIZE))
    return n_blocks(HIDDEN_SIZE) if pieces and pieces[0] * 4 == shared else None


def pipe_utilization(folder) -> list[dict]:
    """Nsight Compute's key numbers for the exact and the diagnostic kernel from the text reports
    the recording keeps beside ``fp8_exactness_cost.json`` (``ncu_fp8_fused.txt``,
    ``ncu_fp8_approx.txt``): duration, DRAM and SM throughput, issue slots, the busiest pipe."""
    from .study import parse_ncu_text

    out = []
    for name in ("fp8_fused", "fp8_approx"):
        path = Path(folder) / f"ncu_{name}.txt"
        if path.exists():
            out.append({"kernel": name, **parse_ncu_text(path.read_text())})
    return out


# ---------------------------------------------------------------- page readers (chapter 8's page)
# What the page shows, computed from the recorded files (and, for the seed's twin, on the CPU).

def timing_rows(doc: dict | None, floor: records.CopyFloor | None = None) -> list[dict]:
    """Per timed shape: the exact contract's naive pair and fused kernel (CUDA-graph times, cold
    L2: the kernels' own time), the copy floor of each design's bytes at ``floor`` (by default the
    book's, beside ``doc``; None where no copy was measured), the speedup and the fused kernel's
    share of its floor; ``served_*``, the same for ``fp8.fused`` (the served contract). Shapes
    whose timing failed are left out."""
    floor = floor or records.copy_floor_beside(doc)
    out = []
    for r in timing_table(doc) if doc else []:
        naive, fused = r.get("naive_graph_us"), r.get("fused_exact_graph_us")
        served = r.get("fused_graph_us")
        if not (naive and fused and served):
            continue
        nbytes = r.get("fused_bytes") or _fused_bytes(r["rows"], r["cols"])
        naive_bytes = r.get("naive_bytes")
        out.append({"rows": r["rows"], "cols": r["cols"], "naive_us": naive, "fused_us": fused,
                    "naive_process_us": r.get("naive_graph_process_us") or [naive],
                    "fused_process_us": r.get("fused_exact_graph_process_us") or [fused],
                    "naive_spread": _spread(r.get("naive_graph_process_us")),
                    "fused_spread": _spread(r.get("fused_exact_graph_process_us")),
                    "processes": r.get("processes", 1),
                    "floor_us": floor.us(nbytes) if floor else None,
                    "naive_floor_us": floor.us(naive_bytes) if floor and naive_bytes else None,
                    "speedup": naive / fused,
                    "pct_floor": floor.pct(nbytes, fused) if floor else None,
                    "served_us": served,
                    "served_process_us": r.get("fused_graph_process_us") or [served],
                    "served_spread": _spread(r.get("fused_graph_process_us")),
                    "served_pct_floor": floor.pct(nbytes, served) if floor else None,
                    "fused_MB": r.get("fused_bytes", 0) / 1e6,
                    "bytes_ratio": r["naive_bytes"] / r["fused_bytes"]
                    if r.get("naive_bytes") and r.get("fused_bytes") else None})
    return out


def _spread(process_us) -> tuple[float, float] | None:
    """(p10, p90) of a time's process medians; None from a single process."""
    from ..measure import compare

    if not process_us or len(process_us) < 2:
        return None
    return compare.quantile_of(process_us, 0.1), compare.quantile_of(process_us, 0.9)


def timing_tie_band(timing: list[dict]) -> float | None:
    """The tie band of :func:`timing_rows` (:func:`fusedrms.measure.compare.tie_band` over the
    naive, fused and served times' process medians); None when every time comes from one
    process."""
    from ..measure import compare

    return compare.tie_band([{"status": "ok", "median_us": r[f"{name}_us"],
                              "process_medians_us": r[f"{name}_process_us"]}
                             for r in timing for name in ("naive", "fused", "served")])


def python_call(doc: dict | None) -> dict | None:
    """The recorded Python call of ``fp8.fused`` beside ``F.rms_norm``'s (µs per call, one row)."""
    rec = next((r for r in (doc or {}).get("records", []) if r.get("kind") == "python_call"
                and r.get("fused_call_us") and r.get("rms_norm_call_us")), None)
    if rec is None:
        return None  # the ratio of interleaved pairs where recorded (ch08_timing), else of medians
    return dict(rec, ratio=rec.get("call_ratio") or rec["fused_call_us"] / rec["rms_norm_call_us"])


# One lever at a time, each from the configuration the previous one left: (lever, hypothesis,
# before, after) with configurations as (warps, maxnreg, division, rows per program, tile).
LEVER_CHAIN = (
    ("one reciprocal per block", "the exact division per element costs issue slots",
     (16, 64, "per_element", 1, "padded"), (16, 64, "block_reciprocal", 1, "padded")),
    ("16 -> 8 warps", "fewer warps per row leave more rows in flight per SM",
     (16, 64, "block_reciprocal", 1, "padded"), (8, None, "block_reciprocal", 1, "padded")),
    ("8 -> 4 warps", "the same, once more",
     (8, None, "block_reciprocal", 1, "padded"), (4, None, "block_reciprocal", 1, "padded")),
    ("unpadded tile (32 + 16 + 8 blocks)", "the padded 64-block tile wastes one lane in eight",
     (4, None, "block_reciprocal", 1, "padded"), (4, None, "block_reciprocal", 1, "split")),
    ("2 rows per program", "more loads in flight per program hide more latency",
     (8, None, "block_reciprocal", 1, "padded"), (8, None, "block_reciprocal", 2, "padded")),
)


def _config_key(r: dict) -> tuple:
    """A candidate as LEVER_CHAIN names it (the lean block steps are not one of its levers)."""
    return (r.get("num_warps"), r.get("maxnreg"), r.get("division"),
            r.get("rows_per_program", 1), r.get("tile", "padded"))


def fp8_levers(cand_doc: dict | None, rows: int | None = None,
               band: float | None = None) -> list[dict]:
    """:data:`LEVER_CHAIN` priced from the recorded candidates at ``rows`` (default: the most
    rows timed): before and after in µs and the change in percent. Levers whose two candidates
    were not both timed and bit-exact are left out, and so, given the recording's tie ``band``
    (a fraction, :func:`timing_tie_band`), are levers that moved the time by no more than it."""
    cands = {_config_key(r): r for r in candidate_table(cand_doc) if r.get("bit_exact") is True
             and "error" not in r and not r.get("lean")} if cand_doc else {}
    timed = sorted({int(k.rsplit("_", 1)[1]) for r in cands.values() for k in r
                    if k.startswith("fused_graph_us_")})
    if not timed:
        return []
    rows = rows or timed[-1]
    out = []
    for lever, hypothesis, before, after in LEVER_CHAIN:
        a, b = (cands.get(k, {}).get(f"fused_graph_us_{rows}") for k in (before, after))
        if a and b and (band is None or abs(b - a) > band * a):
            out.append({"lever": lever, "hypothesis": hypothesis, "rows": rows,
                        "before_us": a, "after_us": b, "change_pct": 100 * (b - a) / a,
                        "kept": b < a, "registers_before": cands[before].get("registers"),
                        "registers_after": cands[after].get("registers")})
    return out


# Seed 002's twin departs from the specification in four places; each can be switched on alone.
TWIN_DEPARTURES = {
    "fp32 sum of squares": "sum",
    "rsqrt, not 1/sqrt correctly rounded": "rsqrt",
    "scale = absmax * (1/448)": "scale",
    "q = y * (1/scale), an approximate division": "divide",
}


def seed_twin(x, w, departures=tuple(TWIN_DEPARTURES.values()), eps: float = RMS_NORM_EPS,
              absmax_floor: float = ABSMAX_FLOOR):
    """The specification with seed 002's twin's shortcuts switched in, on the CPU:
    ``"sum"`` (an fp32 sum of squares instead of float64), ``"rsqrt"`` (torch.rsqrt),
    ``"scale"`` (absmax times 1/448 instead of divided by 448), ``"divide"`` (y times the
    reciprocal of the scale instead of a true division). Returns ``(codes, scales)``."""
    unknown = set(departures) - set(TWIN_DEPARTURES.values())
    if unknown:
        raise validation.InputError(f"unknown departures {sorted(unknown)}; choose from "
                                    f"{sorted(TWIN_DEPARTURES.values())}.")
    x2 = x.detach().cpu().reshape(-1, x.shape[-1])
    xf = x2.float()
    if "sum" in departures:
        sum_sq = (xf * xf).sum(dim=-1, keepdim=True)
    else:
        sum_sq = (xf * xf).double().sum(dim=-1, keepdim=True).float()
    denominator = sum_sq / torch.tensor(float(x2.shape[-1])) + torch.tensor(eps)
    r = torch.rsqrt(denominator) if "rsqrt" in departures else 1 / torch.sqrt(denominator)
    y = (xf * r).to(BF16) * w.detach().cpu()  # step 3, as the twin does it too
    nb = -(-x2.shape[-1] // 128)
    held = torch.nn.functional.pad(y.float(), (0, nb * 128 - x2.shape[-1]))
    blocks = held.reshape(held.shape[0], nb, 128)
    absmax = blocks.abs().amax(dim=-1).clamp_min(absmax_floor)
    scales = (absmax * torch.tensor(1 / FP8_MAX) if "scale" in departures
              else absmax / torch.tensor(FP8_MAX))
    s = scales[..., None]
    q = blocks * (1 / s) if "divide" in departures else blocks / s
    codes = q.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).reshape(held.shape)[:, :x2.shape[-1]]
    return codes.contiguous(), scales


def twin_differences(rows: int = 64, cols: int = HIDDEN_SIZE, seed: int = 0) -> list[dict]:
    """Codes and scales of the seed's twin against the specification (CPU, seeded inputs): each
    shortcut alone, then all four. Scales count as differing when they are not bit-equal."""
    x, w = make_inputs(rows, cols, seed, device="cpu")
    ref_codes, ref_scales = reference(x, w, contract="exact")
    cases = [(name, (key,)) for name, key in TWIN_DEPARTURES.items()]
    cases.append(("all four (the twin)", tuple(TWIN_DEPARTURES.values())))
    out = []
    for name, departures in cases:
        codes, scales = seed_twin(x, w, departures)
        out.append({"shortcut": name,
                    "differing codes": differing_codes(codes, ref_codes),
                    "codes": ref_codes.numel(),
                    "differing scales": int((scales != ref_scales).sum()),
                    "scales": ref_scales.numel(),
                    "passes": compare(codes, scales, ref_codes, ref_scales).ok,
                    # how far apart: e4m3 steps between codes, relative gap between scales
                    "max code steps": int(checks.ulp_distance(codes, ref_codes).max()),
                    "max scale gap": float(((scales.double() - ref_scales.double()).abs()
                                            / ref_scales.double()).max())})
    return out
