"""Chapter 7's tuner: the capstone's launch configuration per (cols, dtype), and the check of a
table's two-pass entries before it is installed. :func:`fusedrms.book.ch07.record` runs both (with
``--tune``); each also runs alone (``python -m fusedrms.book.ch07 tune|check``).

For each key ``(cols, dtype)`` the tuner times every compiled candidate of both designs
(:func:`fusedrms.kernels.add_rmsnorm.candidate_configs` for the row in registers,
:func:`fusedrms.kernels.add_rmsnorm.chunked_candidates` for the two-pass design, plus the heuristic, the
one-row-per-program baseline and the previous table's winner) at several row counts, keeps the two
best of the register design and the best two-pass one, and tries each as a persistent grid (1 or 2
pipeline stages; the two-pass design 1). Every candidate is checked against the float64 reference,
both ops, before it is timed. The winner minimizes the *worst* ratio to the best time seen at any of
the row counts (minimax regret): one configuration per key has to serve every batch size, so it must
not be far off at any of them. fp16 has bf16's element size and the same code path, so it is not
searched again: bf16's best three and the previous fp16 winner are timed on fp16. Keys the budget
does not reach keep the previous table's entry.
"""
from __future__ import annotations

from .. import env  # first

import statistics
import time
from pathlib import Path

import torch

from ..kernels import add_rmsnorm as A
from .. import checks, dtypes, records, reference, tuning
from ..tuning import select_winner  # the rule both tuners follow

TUNE_COLS = (2048, 4096, 8192, 16384)
TUNE_ROWS = (256, 4096, 16384)
SEARCH_DTYPES = (torch.bfloat16, torch.float32)
EPS = 1e-5


def _device() -> torch.device:
    return env.current().device


def log(msg: str) -> None:
    print(f"[capstone {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _timing():
    try:
        from ..measure import timer
    except ImportError as e:
        raise RuntimeError("fusedrms.measure.timer (chapter 6's module) is missing; the capstone studies "
                           "time kernels with timer.time_gpu") from e
    if not hasattr(timer, "time_gpu"):
        raise RuntimeError("fusedrms.measure.timer has no time_gpu(fn, warmup, reps, l2, graph)")
    return timer


def median_us(fn, warmup=3, reps=15, l2="cold", graph=False) -> float:
    return statistics.median(_timing().time_gpu(fn, warmup=warmup, reps=reps, l2=l2, graph=graph))


# ---------------------------------------------------------------- choosing a winner (pure)

def baseline_config(cols: int) -> A.LaunchConfig:
    """The first H200 measurement's kernel: one row per program, warps = BLOCK/256 in 1..16."""
    import triton

    block = triton.next_power_of_2(cols)
    return A.LaunchConfig(1, max(1, min(16, block // 256)), 1, None)


def top(regret: dict, k: int) -> list:
    return sorted(regret, key=lambda c: regret[c])[:k]


# ---------------------------------------------------------------- tuning on the GPU

class _Inputs:
    """Inputs per rows for one key, allocated once and reused by every candidate."""

    def __init__(self, cols: int, dtype: torch.dtype):
        self.cols, self.dtype, self.cache = cols, dtype, {}
        self.w = torch.randn(cols, device=_device(), dtype=dtype)

    def get(self, rows: int):
        if rows not in self.cache:
            x = torch.randn(rows, self.cols, device=_device(), dtype=self.dtype)
            r = torch.randn(rows, self.cols, device=_device(), dtype=self.dtype)
            self.cache[rows] = (x, r, torch.empty_like(x))
        return self.cache[rows]

    def free(self):
        self.cache.clear()


def _measure(cfg: A.LaunchConfig, inputs: _Inputs, rows_list, trials: list, deadline: float) -> dict:
    """{rows: median µs} for one config; checks both ops first. Errors are recorded, not raised."""
    out = {}
    base = {"cols": inputs.cols, "dtype": dtypes.long_name(inputs.dtype), **cfg.as_dict(),
            "label": cfg.label()}
    try:
        x, r, y = inputs.get(min(rows_list))
        s = torch.empty_like(y)
        A.launch(x, r, inputs.w, y, s, EPS, cfg)  # the residual-writing op: s exact, y close
        ref_y, ref_s = reference.add_rmsnorm_residual(x, r, inputs.w, EPS, accum=torch.float64)
        report = checks.equal(s, ref_s)
        if report:
            report = checks.allclose(y, ref_y)
        if report:
            A.launch(x, r, inputs.w, y, None, EPS, cfg)
            report = checks.allclose(y, reference.add_rmsnorm(x, r, inputs.w, EPS,
                                                              accum=torch.float64))
        if not report:
            trials.append({**base, "rows": min(rows_list), "median_us": None,
                           "error": f"wrong result: {report.message}"})
            return {}
        for rows in rows_list:
            if time.time() > deadline:
                break
            x, r, y = inputs.get(rows)
            us = median_us(lambda: A.launch(x, r, inputs.w, y, None, EPS, cfg))
            out[rows] = us
            trials.append({**base, "rows": rows, "median_us": us, "error": None})
    except Exception as e:  # noqa: BLE001  (a config that does not compile is a result)
        trials.append({**base, "rows": None, "median_us": None,
                       "error": f"{type(e).__name__}: {str(e)[:300]}"})
        return {}
    return out if len(out) == len(rows_list) else {}


def previous_winner(cols: int, dtype: torch.dtype, table: dict | None) -> A.LaunchConfig | None:
    """The configuration the current table holds for this key (timed again: a new search must not
    lose the old winner)."""
    if not table:
        return None
    return table.get("configs", {}).get((cols, dtypes.long_name(dtype)))


def _best_per_design(regret: dict, whole: int = 2, chunked: int = 1) -> list:
    """The best few of each design (row in registers, two passes), best first within each. The
    two-pass design fills an SM with programs on its own, so one of it is tried persistent."""
    ranked = top(regret, len(regret))
    return ([c for c in ranked if c.chunk is None][:whole]
            + [c for c in ranked if c.chunk is not None][:chunked])


def tune_key(cols: int, dtype: torch.dtype, rows_list, deadline: float, trials: list,
             candidates=None, previous: A.LaunchConfig | None = None) -> dict | None:
    inputs = _Inputs(cols, dtype)
    heuristic, baseline = A.heuristic_config(cols, dtype), baseline_config(cols)
    if candidates is None:
        # the known-good ones first, so a key cut short by its budget still has them
        known = [previous] if previous is not None else []
        candidates = list(dict.fromkeys(known + [heuristic, baseline]
                                        + A.candidate_configs(cols, dtype)
                                        + A.chunked_candidates(cols, dtype)))
    times = {}
    for cfg in candidates:
        if time.time() > deadline:
            break
        times[cfg] = _measure(cfg, inputs, rows_list, trials, deadline)
    if not any(times.values()):
        inputs.free()
        return None
    _, regret = select_winner(times)
    for cfg in _best_per_design(regret):
        for variant in A.persistent_variants(cfg):
            if time.time() > deadline:
                break
            if variant not in times:
                times[variant] = _measure(variant, inputs, rows_list, trials, deadline)
    # Timings of medium shapes are noisy: time the finalists again, interleaved, keep the better
    # median of the two for each, and choose among them.
    _, regret = select_winner(times)
    finalists = list(dict.fromkeys(top(regret, 4) + [c for c in (heuristic, baseline, previous)
                                                     if c is not None and times.get(c)]))
    for rows in rows_list:
        x, r, y = inputs.get(rows)
        for cfg in finalists:
            if time.time() > deadline + 5:  # cheap (no compiles): a few seconds of slack
                break
            try:
                again = median_us(lambda: A.launch(x, r, inputs.w, y, None, EPS, cfg))
                times[cfg][rows] = min(times[cfg][rows], again)
            except Exception as e:  # noqa: BLE001
                log(f"re-timing {cfg.label()} at {rows} rows failed: {e}")
    winner, regret = select_winner({c: times[c] for c in finalists})
    inputs.free()
    return {"cols": cols, "dtype": dtypes.long_name(dtype), **winner.as_dict(), "label": winner.label(),
            "worst_ratio_to_best": regret[winner],
            "rows_timed": sorted(times[winner]),
            "times_us": {str(n): times[winner][n] for n in sorted(times[winner])},
            "heuristic": heuristic.as_dict(),
            "heuristic_times_us": {str(n): v for n, v in sorted(times.get(heuristic, {}).items())},
            "baseline": baseline.as_dict(),
            "baseline_times_us": {str(n): v for n, v in sorted(times.get(baseline, {}).items())},
            "previous": None if previous is None else previous.as_dict(),
            "previous_times_us": {str(n): v for n, v in
                                  sorted(times.get(previous, {}).items())} if previous else {},
            "configs_timed": sum(1 for t in times.values() if t),
            "finalists": [c.label() for c in finalists],
            "ranked": [{**c.as_dict(), "worst_ratio_to_best": regret[c]} for c in top(regret, 5)]}


def warm_up_gpu(seconds: float = 1.0) -> None:
    """Keep the GPU busy for a moment so clocks have ramped up before the first timing."""
    if not torch.cuda.is_available():
        return
    a = torch.empty(64 << 20, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize()
    del a, b


def key_order(cols_list, dtypes) -> list:
    """Keys in the order the tuner visits them: narrow widths first (where tuning matters most),
    alternating dtypes, so a short budget still covers both."""
    return [(cols, dtype) for cols in sorted(cols_list) for dtype in dtypes]


def tune_table(out_dir: Path, budget_s: float, cols_list=TUNE_COLS, rows_list=TUNE_ROWS,
         previous_path: Path | None = None) -> Path:
    env.require_gpu("tuning the capstone")
    start = time.time()
    # the table in use (committed): its winners are timed again, and carried over for keys the
    # budget does not reach, so a short run never leaves a key worse off than before
    previous = (tuning.active("capstone") if previous_path is None
                else tuning.load("capstone", previous_path))
    if previous.get("gpu") != env.current().gpu_name:
        previous = {"configs": {}}
    deadline = start + budget_s
    winners, trials = [], []
    table_path = out_dir / "tuning" / "capstone.json"
    table_path.parent.mkdir(parents=True, exist_ok=True)
    trials_path = out_dir / "capstone_tuning_trials.json"
    extra = {"objective": "minimize the worst ratio to the best time over rows "
                          + ", ".join(map(str, rows_list)) + " (L2 flushed before every call)",
             "rows": list(rows_list), "eps": EPS}

    def carried_over() -> list:
        """Keys not (yet) tuned: the previous table's entry, marked as such."""
        return [{"cols": cols, "dtype": name, **cfg.as_dict(), "label": cfg.label(),
                 "times_us": {}, "source": "previous table's entry, not re-tuned: budget spent"}
                for (cols, name), cfg in sorted(previous.get("configs", {}).items())
                if not any(v["cols"] == cols and v["dtype"] == name for v in winners)]

    def save():  # after every key: a run killed part-way still leaves a complete table
        records.write(table_path, winners + carried_over(), extra)
        records.write(trials_path, trials, extra)

    warm_up_gpu()

    keys = key_order(cols_list, SEARCH_DTYPES)
    for i, (cols, dtype) in enumerate(keys):
        now = time.time()
        if now > deadline:
            log(f"budget spent: ({cols}, {dtypes.long_name(dtype)}) not tuned (the previous entry, if any, stays)")
            continue
        # each remaining key gets a share of what is left in proportion to its work (its candidates
        # plus the persistent variants); a key that finishes early passes its time on
        weight = [len(A.candidate_configs(c, d)) + len(A.chunked_candidates(c, d)) + 10
                  for c, d in keys[i:]]
        key_deadline = min(deadline, now + (deadline - now) * weight[0] / sum(weight))
        result = tune_key(cols, dtype, rows_list, key_deadline, trials,
                          previous=previous_winner(cols, dtype, previous))
        if result is None:
            log(f"({cols}, {dtypes.long_name(dtype)}): no configuration timed")
            continue
        result["source"] = "searched"
        winners.append(result)
        save()
        log(f"({cols}, {dtypes.long_name(dtype)}): {result['label']}, worst ratio "
            f"{result['worst_ratio_to_best']:.3f}, times {result['times_us']} "
            f"({result['configs_timed']} configs, {time.time() - now:.1f} s)")
    # fp16: bf16's best few, timed on fp16
    for cols in cols_list:
        bf16 = next((w for w in winners if w["cols"] == cols and w["dtype"] == "bfloat16"), None)
        if bf16 is None or time.time() > deadline:
            continue
        cands = [A.LaunchConfig(**{k: c.get(k) for k in ("rows_per_program", "num_warps",
                                                          "num_stages", "programs_per_sm",
                                                          "chunk")})
                 for c in bf16["ranked"][:3]]
        old = previous_winner(cols, torch.float16, previous)
        cands = list(dict.fromkeys(cands + ([old] if old is not None else [])))
        result = tune_key(cols, torch.float16, rows_list, deadline, trials, candidates=cands,
                          previous=old)
        if result is not None:
            result["source"] = ("bfloat16's best three and the previous winner, timed on float16 "
                                "(same element size)")
            winners.append(result)
            save()
            log(f"({cols}, float16): {result['label']}, times {result['times_us']}")
    # fp16 keys the budget did not reach: the previous table's (timed) entry if there is one, else
    # bf16's winner, same element size, marked untimed
    for w in [w for w in winners if w["dtype"] == "bfloat16"]:
        if (w["cols"], "float16") in previous.get("configs", {}):
            continue
        if not any(v["cols"] == w["cols"] and v["dtype"] == "float16" for v in winners):
            winners.append({**w, "dtype": "float16", "times_us": {}, "heuristic_times_us": {},
                            "baseline_times_us": {}, "source": "bfloat16's winner (same element "
                            "size), not timed on float16: budget spent"})
    save()  # keys the budget did not reach keep the previous table's entry
    log(f"tuning done in {time.time() - start:.1f} s: {len(winners)} keys, {len(trials)} trials")
    return table_path


# (rows, columns short of the key's width, strided rows): shapes the tuner did not time
CHECK_SHAPES = ((1, 0, False), (3, 3, True))


def check_table(out_dir: Path, budget_s: float, table_path: Path | None = None,
                every_entry: bool = False, results: list | None = None, shapes=None) -> bool:
    """Check the table's two-pass entries through the wrappers, on shapes the tuner did not time:
    one row, and 3 strided rows 3 columns short of the key's width (a partial last chunk).
    Both ops against the float64 references (``s`` bit for bit). True when every check passed
    (a budget spent before the end counts as a failure: an unchecked entry is not installed)."""
    env.require_gpu("checking the tuning table")
    start = time.time()
    table = tuning.active("capstone") if table_path is None else tuning.load("capstone", table_path)
    entries = {k: c for k, c in table["configs"].items() if every_entry or c.chunk is not None}
    failures = 0
    for (cols, name), cfg in sorted(entries.items()):
        dtype = dtypes.torch_dtype(name)
        for rows, width_less, strided in (shapes or CHECK_SHAPES):
            width = cols - width_less
            if time.time() > start + budget_s:
                log("check: budget spent before every entry was checked")
                return False
            base = torch.randn(rows, width + (5 if strided else 0), device=_device(), dtype=dtype)
            x = base[:, :width]  # strided rows when the base is wider
            r = torch.randn(rows, width, device=_device(), dtype=dtype)
            w = torch.randn(width, device=_device(), dtype=dtype)
            y = A.add_rmsnorm(x, r, w, EPS, config=cfg)
            y2, s2 = A.add_rmsnorm_residual(x, r, w, EPS, config=cfg)
            ref_y2, ref_s = reference.add_rmsnorm_residual(x, r, w, EPS, accum=torch.float64)
            ok = (bool(checks.allclose(y, reference.add_rmsnorm(x, r, w, EPS,
                                                                accum=torch.float64)))
                  and bool(checks.equal(s2, ref_s)) and bool(checks.allclose(y2, ref_y2)))
            failures += not ok
            if results is not None:
                results.append({"kind": "capstone_config", "cols": cols, "dtype": name,
                                "config": cfg.label(), "rows": rows, "width": width,
                                "strided": strided, "ok": ok})
            log(f"check {rows}x{width} {name} ({cfg.label()}): {'ok' if ok else 'FAILED'}")
    log(f"check: {len(entries)} two-pass entries, {failures} failed ({time.time() - start:.1f} s)")
    return failures == 0

