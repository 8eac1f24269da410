"""Chapter 8's tuner: every launch candidate of the fused FP8 kernel (:data:`fusedrms.kernels.
rmsnorm_fp8.CANDIDATES`) at every width the book times it at, checked bit for bit under both
contracts on the GPU and timed at that width's rows; the winner per width and contract
(:func:`best_candidate`: the smallest worst ratio to the best time at any of the rows, the rule
chapter 7's tuner follows) goes into ``tuning/fp8.json`` (:func:`write_tuning_table`), which
:func:`fusedrms.kernels.rmsnorm_fp8.choose_config` reads. :func:`fusedrms.book.ch08.record` runs it.
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit

import dataclasses
import functools
import time

import torch

from .. import records, tuning
from ..kernels.rmsnorm_fp8 import (
    CANDIDATES, DIVISIONS, FusedConfig, _launch_fused, _launch_setup, baseline_config,
    lean_division_report, rmsnorm_fp8_fused, rmsnorm_fp8_naive, split_pieces)
from ..kernels.rmsnorm_fp8_spec import (
    ABSMAX_FLOOR, BF16, HIDDEN_SIZE, RMS_NORM_EPS, compare, make_inputs, n_blocks, reference)

# The widths the book times fp8.fused at, each tuned at the rows the book times it with: the
# chapter's 7168 columns, and chapter 6's grid at 4096 and 8192 (a width without an entry runs
# baseline_config, whose warps rule chose 16 warps at 8192 columns). {cols: rows}; the first width
# is the chapter's, where the naive pair is timed beside the candidates.
TUNING_SHAPES = {HIDDEN_SIZE: (4096, 16384, 32768), 8192: (4096, 16384), 4096: (4096, 16384)}
CANDIDATE_CHECK_SHAPES = ((3, 129), (7, 1000), (64, 7168), (4, 16384), (4096, 7168))


def edge_inputs(device=None):
    """Inputs that reach the corners of the division: signed zeros, a zero block, tiny blocks
    (scales below 2^-90 without a floor), subnormal bf16 values, and a huge gamma that makes some
    normalized values infinite (an infinite scale). Returns a list of (name, x, w, floor)."""
    device = device or env.current().device
    x, w = make_inputs(6, 1024, 7, device="cpu")
    x[0, :64] = -0.0
    x[0, 64:128] = 0.0
    x[1, :128] = 0.0
    x[2, 128:256] *= 1e-30  # tiny next to the row: normalized values underflow towards 0
    x[3] *= 1e-36  # a whole tiny row
    tiny_x = x.clone()
    w_huge = w.clone()
    w_huge[256:384] = 3.0e38  # bf16 products overflow to inf in this block
    out = [("signed zeros and tiny blocks", x, w, ABSMAX_FLOOR),
           ("same, no floor", tiny_x, w, 0.0),
           ("same, floor 1e-30", tiny_x, w, 1e-30),
           ("infinite values (huge gamma), no floor", x, w_huge, 0.0),
           ("infinite values (huge gamma)", x, w_huge, ABSMAX_FLOOR)]
    g = torch.Generator().manual_seed(11)
    sub = (torch.randn(4, 512, generator=g) * 1e-39).to(BF16)  # bf16 subnormals
    out.append(("subnormal x, no floor", sub, torch.ones(512, dtype=BF16), 0.0))
    return [(name, a.to(BF16).to(device), b.to(BF16).to(device), f) for name, a, b, f in out]


def fused_resources(config: FusedConfig, cols: int = HIDDEN_SIZE) -> tuple:
    """(registers, spills) per thread of the exact contract's fused kernel compiled for ``config``
    (None: interpreter)."""
    x, w = make_inputs(2, cols, 0)
    x2, w, eps, floor, shape, codes, codes_out, scales, meta = _launch_setup(
        x, w, RMS_NORM_EPS, ABSMAX_FLOOR, "auto", None, True, None, config, "exact")
    k, _ = _launch_fused(x2, w, codes_out, scales, eps, floor, meta)
    return getattr(k, "n_regs", None), getattr(k, "n_spills", None)


@functools.lru_cache(maxsize=32)  # every shape and seed, under both contracts
def _case(rows: int, cols: int, seed: int, contract: str = "exact"):
    """Inputs and reference of one check, kept: every candidate is checked on the same cases."""
    x, w = make_inputs(rows, cols, seed)
    return x, w, reference(x, w, contract=contract)


def _random_exactness(config: FusedConfig, contract: str, shapes, seeds) -> tuple:
    """``config``'s codes and scales under ``contract`` against that contract's reference, bit
    for bit, on random inputs: (checks, differing codes, failures)."""
    checked = differing = 0
    failures = []
    for rows, cols in shapes:
        for seed in seeds:
            x, w, ref = _case(rows, cols, seed, contract)
            report = compare(*rmsnorm_fp8_fused(x, w, config=config, contract=contract), *ref)
            checked += 1
            differing += report.mismatches
            if not report.ok:
                failures.append(f"{rows}x{cols} seed {seed}: {report}")
    return checked, differing, failures


def candidate_exactness(config: FusedConfig, shapes=CANDIDATE_CHECK_SHAPES, seeds=(0, 1)) -> dict:
    """One fused configuration, checked twice: on random inputs its codes must equal the
    reference's bit for bit; on :func:`edge_inputs` they must equal the baseline kernel's (the
    same arithmetic up to the division: any difference there is the candidate's fault, while a
    difference between baseline and reference at those corners is recorded, not blamed on it)."""
    checked, differing, failures = _random_exactness(config, "exact", shapes, seeds)
    edge_vs_reference = 0
    for name, x, w, floor in edge_inputs():
        out = rmsnorm_fp8_fused(x, w, absmax_floor=floor, config=config, contract="exact")
        base = rmsnorm_fp8_fused(x, w, absmax_floor=floor, config=baseline_config(x.shape[-1]),
                                 contract="exact")
        report = compare(*out, *base)
        edge_vs_reference += compare(*out, *reference(x, w, absmax_floor=floor,
                                                      contract="exact")).mismatches
        checked += 1
        differing += report.mismatches
        if not report.ok:
            failures.append(f"{name} (against the baseline kernel): {report}")
    return {"exact_checks": checked, "differing_codes": differing, "bit_exact": not failures,
            "edge_codes_differing_from_reference": edge_vs_reference, "failures": failures[:3]}


def served_exactness(config: FusedConfig, shapes=CANDIDATE_CHECK_SHAPES, seeds=(0, 1)) -> dict:
    """One configuration under the served contract: its codes and scales against the served
    reference, bit for bit, on the candidates' random inputs."""
    checked, differing, failures = _random_exactness(config, "served", shapes, seeds)
    return {"served_checks": checked, "served_differing_codes": differing,
            "served_bit_exact": not failures, "served_failures": failures[:3]}


def lean_proof() -> dict:
    """The lean block steps' proof on this device, run once and shared with every launch
    (:func:`fusedrms.kernels.rmsnorm_fp8.lean_division_report`)."""
    return lean_division_report(env.current().device)


def check_shapes_at(cols: int) -> tuple:
    """The candidates' check shapes, plus 64 rows of ``cols`` where none of them has that width
    (a width compiles its own tile)."""
    return CANDIDATE_CHECK_SHAPES + (() if any(c == cols for _, c in CANDIDATE_CHECK_SHAPES)
                                     else ((64, cols),))


def applies_at(config: FusedConfig, cols: int) -> bool:
    """Whether ``config`` launches as itself at ``cols``: a split tile needs the row's blocks to be
    three powers of two (56 = 32 + 16 + 8); elsewhere it runs the padded tile, a duplicate."""
    return config.tile != "split" or split_pieces(n_blocks(cols)) is not None


def candidates_records(configs=CANDIDATES, widths=None, warmup: int = 5, reps: int = 20,
                       log=print, deadline: float | None = None, progress=None) -> list[dict]:
    """Every candidate configuration of the fused kernel at every width of ``widths`` ({cols:
    rows}, default :data:`TUNING_SHAPES`), under both contracts: bit-exactness on the GPU,
    registers, and median times (cold L2, with and without CUDA-graph replay) at the width's rows.
    One record per candidate and width. The naive pair is timed beside them at the first width
    (the chapter's) for the ratio."""
    from ..measure import timer

    widths = dict(TUNING_SHAPES if widths is None else widths)
    out = []
    start = time.time()
    inputs = {(rows, cols): make_inputs(rows, cols, 0) for cols, rows_ in widths.items()
              for rows in rows_}

    def med(fn, graph):
        t = sorted(float(v) for v in timer.time_gpu(fn, warmup, reps, l2="cold", graph=graph))
        return t[len(t) // 2]

    def time_into(rec, prefix, call, cols):  # the width's rows, with and without graph replay
        for (rows, c), (x, w) in inputs.items():
            if c != cols:
                continue
            for graph, suffix in ((True, "_graph"), (False, "")):
                rec[f"{prefix}{suffix}_us_{rows}"] = med(lambda: call(x, w), graph)

    first = next(iter(widths))
    for division in DIVISIONS:
        rec = {"kind": "naive_reference", "division": division, "cols": first}
        try:
            time_into(rec, "naive", lambda x, w: rmsnorm_fp8_naive(x, w, division=division,
                                                                   contract="exact"), first)
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"
        out.append(rec)
        log(f"  naive, {division} division: {rec}")
    for cols in widths:
        for cfg in configs:
            if not applies_at(cfg, cols):
                continue
            out.append(_candidate_record(cfg, cols, time_into, deadline, log))
            if progress is not None:
                progress(out)  # written after every candidate: a timeout keeps what was measured
            log(f"    (+{time.time() - start:.0f} s)")
    return out


def _candidate_record(cfg: FusedConfig, cols: int, time_into, deadline, log) -> dict:
    """One candidate at one width: checked under both contracts, then timed under each it
    passes (a failure is recorded in the record, never raised)."""
    rec = {"kind": "candidate", "label": cfg.label, **dataclasses.asdict(cfg),
           "cols": cols, "baseline": cfg == baseline_config(cols)}
    if deadline is not None and time.time() > deadline:
        rec["skipped"] = "time budget spent"
        log(f"  candidate {cfg.label} at {cols} columns: skipped (time budget spent)")
        return rec
    shapes = check_shapes_at(cols)
    try:
        rec.update(candidate_exactness(cfg, shapes))
        if cfg.lean:  # random inputs cannot reach every absmax: the divisions are proven apart
            rec["lean_division_errors"] = lean_proof()
            if any(v for k, v in rec["lean_division_errors"].items() if k != "checked"):
                rec.update(bit_exact=False, served_bit_exact=False,
                           failures=[f"lean block divisions: {rec['lean_division_errors']}"])
    except Exception as e:  # noqa: BLE001
        rec.update(bit_exact=False, error=f"exactness: {type(e).__name__}: {e}")
    try:
        rec["registers"], rec["spills"] = fused_resources(cfg, cols)
        time_into(rec, "fused", lambda x, w: rmsnorm_fp8_fused(x, w, config=cfg,
                                                               contract="exact"), cols)
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{type(e).__name__}: {e}"
    if cfg.runs("served") and rec.get("served_bit_exact") is not False:
        try:
            rec.update(served_exactness(cfg, shapes))
            time_into(rec, "served", lambda x, w: rmsnorm_fp8_fused(x, w, config=cfg,
                                                                    contract="served"), cols)
        except Exception as e:  # noqa: BLE001
            rec["served_error"] = f"{type(e).__name__}: {e}"
    log(f"  candidate {cfg.label} at {cols} columns: exact {rec.get('bit_exact')} "
        f"({rec.get('differing_codes')} codes differ), registers {rec.get('registers')}, "
        + ", ".join(f"{k} {v:.1f}" for k, v in rec.items()
                    if k.startswith(("fused", "served")) and isinstance(v, float)))
    return rec


# what each contract's tuning reads from a candidate record: (its times' prefix, its exactness key,
# its error key)
CONTRACT_KEYS = {"exact": ("fused", "bit_exact", "error"),
                 "served": ("served", "served_bit_exact", "served_error")}


def _width(r: dict) -> int:
    return int(r.get("cols", HIDDEN_SIZE))  # a record without a width is the chapter's


def best_candidate(recs: list[dict], rows: int | None = None, contract: str = "exact",
                   cols: int = HIDDEN_SIZE) -> dict | None:
    """The candidate at ``cols`` bit-exact under ``contract`` that :func:`fusedrms.tuning.
    select_winner` picks from its CUDA-graph times under it at the width's timed rows (or at
    ``rows`` alone). A candidate missing one of the rows others were timed at cannot win. None
    when none is bit-exact and timed."""
    prefix, exact_key, error_key = CONTRACT_KEYS[contract]
    cands = candidate_table({"records": recs}, cols)
    timed = {k for r in cands for k in r if k.startswith(f"{prefix}_graph_us_")}
    keys = [f"{prefix}_graph_us_{rows}"] if rows is not None else sorted(timed)
    fine = [r for r in cands if r.get(exact_key) is True and error_key not in r
            and "skipped" not in r and keys
            and all(isinstance(r.get(k), (int, float)) and r[k] > 0 for k in keys)]
    if not fine:
        return None
    winner, _ = tuning.select_winner({i: {k: r[k] for k in keys} for i, r in enumerate(fine)})
    return fine[winner]


def write_tuning_table(path, recs: list[dict], log=print) -> dict[tuple, FusedConfig]:
    """Write ``tuning/fp8.json``: each width's winner under each contract (one entry per width
    and contract, for the wrapper); returns ``{(cols, contract): config}`` of the winners (empty,
    and no file, when none is bit-exact)."""
    rows, winners, objective = [], {}, []
    widths = list(dict.fromkeys(_width(r) for r in candidate_table({"records": recs}, None)))
    for cols in widths:
        for contract, (prefix, _, _) in CONTRACT_KEYS.items():
            best = best_candidate(recs, contract=contract, cols=cols)
            if best is None:
                log(f"  no candidate bit-exact and timed under the {contract} contract at {cols} "
                    f"columns")
                continue
            cfg = FusedConfig(best["num_warps"], best["maxnreg"], best["division"],
                              best.get("rows_per_program", 1), best.get("tile", "padded"),
                              best.get("lean", False) is True)
            winners[(cols, contract)] = cfg
            times = {k: v for k, v in best.items() if k.startswith(f"{prefix}_") and "_us" in k}
            rows.append({"cols": cols, "contract": contract, "num_warps": cfg.num_warps,
                         "maxnreg": cfg.maxnreg, "division": cfg.division,
                         "rows_per_program": cfg.rows_per_program, "tile": cfg.tile,
                         "lean": cfg.lean,
                         "bit_exact": True, "label": cfg.label, **times})
            log(f"  {contract} contract's winner at {cols} columns: {cfg.label}")
        timed = sorted({int(k.rsplit("_", 1)[1]) for r in rows if r["cols"] == cols
                        for k in r if "_graph_us_" in k})
        if timed:
            objective.append(f"{'/'.join(map(str, timed))}x{cols}")
    if not rows:
        log("  no bit-exact timed candidate: no tuning table written")
        return {}
    records.write(path, rows, extra={"objective": "per width and contract, among the candidates "
                                     "bit-exact under it, the smallest worst ratio of its CUDA-graph "
                                     "time to the best at any of the width's calls ("
                                     + ", ".join(objective) + ")"})
    log(f"  wrote {path}")
    return winners


def candidate_table(doc: dict, cols: int | None = HIDDEN_SIZE) -> list[dict]:
    """The recorded launch candidates of the fused kernel at ``cols`` (the chapter's width by
    default; None: every width), one dict each, times in us."""
    return [r for r in doc["records"] if r.get("kind") == "candidate"
            and (cols is None or _width(r) == cols)]
