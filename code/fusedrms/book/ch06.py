"""Chapter 6's companion: the recorded benchmark grid, the timing rules measured kept and broken,
the Nsight Compute profile at the tuned configuration, the chart, and their readers.

``record(out_dir)`` writes ``bench_grid.json`` + ``bench_grid.csv`` (the harness's ``h200`` plan:
every registered kernel and peer, medians over 3 processes), ``timing_rules.json``,
``ncu_summary.json`` + ``ncu_raw.txt`` (skipped with the reason recorded when there is no ncu) and
``bench_plot.png`` + ``bench_plot.svg``.
"""
from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from pathlib import Path

from .. import dtypes, env, records
from ..measure import harness, ncu, plots
from . import page
from ..measure.harness import FloorUnavailable, floor_bytes, pick_target
from ..measure.worker import _sync_wall_ms, make_inputs


def readable_us(us: float | None) -> str:
    """A time in the unit that reads, to three figures: 0.85 µs, 99.2 µs, 208 µs, 2.70 ms, 231 ms,
    7.44 s ("-" when missing)."""
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e5:
        return f"{us / 1e3:.0f} ms"
    if us >= 1e4:
        return f"{us / 1e3:.1f} ms"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    if us >= 100:
        return f"{us:.0f} µs"
    return f"{us:.2f} µs" if us < 10 else f"{us:.1f} µs"


def times_in_words(ratio: float) -> str:
    """A large ratio said plainly: "1.3 times", "71 times", "about 2,300 times"."""
    if ratio < 10:
        return f"{ratio:.1f} times"
    if ratio < 1000:
        return f"{ratio:.0f} times"
    digits = len(str(int(ratio))) - 2
    return f"about {round(ratio, -digits):,.0f} times"


def find_rule(doc: dict | None, name: str) -> dict | None:
    """The rule ``name`` of a timing-rules recording, if it was measured (status ok)."""
    for r in (doc or {}).get("records", []):
        if r.get("rule") == name and r.get("status") == "ok":
            return r
    return None


def sync_rows(doc: dict | None) -> list[dict] | None:
    """The synchronize rule at every recorded size: bytes, the CPU clock without and with a
    synchronize, device events. None when the recording predates the sweep over sizes."""
    rule = find_rule(doc, "synchronize")
    if not rule or "shapes" not in rule:
        return None
    return sorted(rule["shapes"], key=lambda r: r["rows"])


def warmup_view(doc: dict | None) -> dict | None:
    """First call against the warmed median, for the kernel and (when recorded) torch.compile."""
    rule = find_rule(doc, "warm-up")
    if not rule:
        return None
    out = dict(impl=rule["impl"], shape=f"{rule['rows']:,} x {rule['cols']:,} {rule['dtype']}",
               first_us=rule["ignored"]["median_us"], warm_us=rule["followed"]["median_us"],
               mean_with_first_us=rule["mean_with_first_us"],
               median_with_first_us=rule["median_with_first_us"])
    out["ratio"] = out["first_us"] / out["warm_us"]
    if "compile" in rule:
        c = rule["compile"]
        out.update(compile_impl=c["impl"], compile_first_us=c["first_call_us"],
                   compile_warm_us=c["median_us"], compile_ratio=c["first_call_us"] / c["median_us"])
    return out


def l2_rows(doc: dict | None) -> tuple[list[dict], dict] | None:
    """The L2 rule (one call per graph replay, warm and flushed) at every size, and its headline
    shape. None when the recording predates that method."""
    rule = find_rule(doc, "L2")
    if not rule or "headline" not in rule:
        return None
    return sorted(rule["shapes"], key=lambda r: r["rows"]), rule


def graph_rows(doc: dict | None) -> list[dict] | None:
    """The graph rule: every implementation and small shape, six ways of launching."""
    rule = find_rule(doc, "graph")
    return None if not rule else rule["impls"]


def process_view(grid: dict | None) -> dict | None:
    """Every cold case's process medians (from the grid itself), the outlier case, the counts."""
    try:
        return process_spreads(grid)
    except RuntimeError:
        return None


def grid_rows(grid: dict | None, dtype: str = "bf16", sweep: str = "grid") -> list[dict]:
    """The grid's measured cases of one dtype, sorted by implementation and bytes moved."""
    recs = [r for r in (grid or {}).get("records", []) if r.get("sweep") == sweep
            and r.get("dtype") == dtype and r.get("status") == "ok" and r.get("bytes")]
    return sorted(recs, key=lambda r: (r["impl"], r["bytes"]))


def two_questions(grid: dict | None, stream: dict | None, impl: str, dtype: str = "bf16"
                  ) -> list[dict]:
    """``impl`` at every shape timed both ways: one isolated call (the grid's cold L2) and a
    call in a stream (rotating inputs in a graph: the grid's ``stream`` sweep, else ``stream``,
    another file of the same recording, such as chapter 7's peers). Sorted by bytes moved."""
    def pick(doc, sweep, mode):
        return {(r["rows"], r["cols"]): r for r in (doc or {}).get("records", [])
                if r.get("impl") == impl and r.get("dtype") == dtype and r.get("status") == "ok"
                and r.get("mode") == mode and (sweep is None or r.get("sweep") == sweep)}

    cold = pick(grid, "grid", "cold")
    rotating = pick(grid, "stream", "rotating") or pick(stream, None, "rotating")
    rows = []
    for shape in sorted(set(cold) & set(rotating), key=lambda k: cold[k].get("bytes") or 0):
        one, flow = cold[shape], rotating[shape]
        rows.append({"rows": shape[0], "cols": shape[1], "bytes": one.get("bytes"),
                     "one_call_us": one["median_us"], "stream_us": flow["median_us"],
                     "one_call": page.median_with_spread(one),
                     "stream": page.median_with_spread(flow),
                     "ratio": one["median_us"] / flow["median_us"]})
    return rows


def floor_summary(grid: dict | None, impl: str, min_bytes: float = 64e6,
                  share: float = 85.0) -> dict | None:
    """How close ``impl`` comes to the copy floor on the grid's large shapes (every dtype)."""
    recs = [r for r in (grid or {}).get("records", []) if r.get("sweep") == "grid"
            and r.get("impl") == impl and r.get("status") == "ok"
            and (r.get("bytes") or 0) >= min_bytes and r.get("pct_of_floor") is not None]
    if not recs:
        return None
    pcts = [r["pct_of_floor"] for r in recs]
    return dict(impl=impl, cases=len(recs), min_pct=min(pcts), max_pct=max(pcts),
                median_pct=statistics.median(pcts), at_least=sum(p >= share for p in pcts),
                share=share, min_bytes=min_bytes)


def grid_health(grid: dict | None, sweep: str | None = None) -> dict | None:
    """Counts a reader checks beside a speed table: measured, outside the tolerance, and not run,
    split into widths an implementation declares it cannot handle, cases the recording skipped
    (its time ran out: missing, not failed) and errors. ``sweep``: only that sweep's cases (the
    table beside it), else every case of the file."""
    if not grid:
        return None
    recs = [r for r in grid["records"] if sweep is None or r.get("sweep") == sweep]
    if not recs:
        return None
    ok = [r for r in recs if r.get("status") == "ok"]
    wrong = [r for r in ok if r.get("correct") is False]
    not_run = [r for r in recs if r.get("status") != "ok"]

    def status_is(r, word):
        return str(r.get("status", "")).startswith(word)

    unsupported = [r for r in not_run if status_is(r, "unsupported")]
    skipped = [r for r in not_run if status_is(r, "skipped")]
    errors = [r for r in not_run if r not in unsupported and r not in skipped]
    # compile_s: the one cold compile of the warm-up (a number); older recordings kept a list
    comp = [s for r in ok if r.get("compile_s") is not None
            for s in (r["compile_s"] if isinstance(r["compile_s"], list) else [r["compile_s"]])]

    def impls(group):
        return sorted({r["impl"] for r in group})

    return dict(cases=len(recs), measured=len(ok), wrong=len(wrong), wrong_impls=impls(wrong),
                not_run=len(not_run), unsupported=len(unsupported),
                unsupported_impls=impls(unsupported), skipped=len(skipped),
                skipped_impls=impls(skipped), errors=len(errors), error_impls=impls(errors),
                compile_median_s=statistics.median(comp) if comp else None)


NCU_PICKS = {  # what the chapter shows from ncu's sections: label -> (section word, metric name)
    "Block size": ("Launch", "Block Size"),
    "Grid size": ("Launch", "Grid Size"),
    "Registers per thread": ("Launch", "Registers Per Thread"),
    "Theoretical occupancy": ("Occupancy", "Theoretical Occupancy"),
    "Achieved occupancy": ("Occupancy", "Achieved Occupancy"),
    "Warp cycles per issued instruction": ("Warp State", "Warp Cycles Per Issued Instruction"),
}


def ncu_view(doc: dict | None) -> dict | None:
    """The profile's numbers, missing ones None: DRAM bytes as counted (read, written), the launch
    statistics, occupancy and warp state picked from the raw metrics, the configuration in use."""
    if not doc or not doc.get("records"):
        return None
    s = doc["records"][0]
    out = {k: s.get(k) for k in ("status", "reason", "impl", "kernel", "rows", "cols", "dtype",
                                 "duration_us", "dram_throughput_pct", "sol_memory_pct",
                                 "l2_hit_pct", "bytes_read", "bytes_write", "dram_bytes",
                                 "implied_bytes", "model_bytes", "config")}
    metrics = {}
    for k in s.get("kernels") or []:
        if k.get("kernel") == s.get("kernel"):
            metrics = k.get("metrics", {})
    for label, (section, name) in NCU_PICKS.items():
        hit = next((v for key, v in metrics.items()
                    if key.split(" / ")[0].startswith(section) and key.endswith(" / " + name)), None)
        out[label] = None if hit is None else _metric_text(hit.get("value"), hit.get("unit"))
    out["config"] = _config_launched(out)
    return out


# The large-batch rule's two-pass launch in recordings before TWO_PASS_CONFIG: programs of 16 warps
# over 2,048-column chunks (four to an SM, a row each between the passes).
TWO_PASS_BEFORE_WARPS, TWO_PASS_BEFORE_CHUNK = 16, 2048


def _config_launched(view: dict) -> dict | None:
    """The recorded configuration, or, where a recording kept the table's entry although the
    large-batch rule launched the two-pass kernel (recordings before the rule was asked), the
    rule's configuration: the label names what ncu profiled."""
    cfg = view.get("config")
    if not cfg or cfg.get("chunk") is not None or "chunked" not in str(view.get("kernel")):
        return cfg
    from ..kernels import add_rmsnorm as k

    rule = k.LaunchConfig(1, TWO_PASS_BEFORE_WARPS, 1, None, TWO_PASS_BEFORE_CHUNK)
    return dict(cfg, **rule.as_dict(), label=rule.label(), source="the large-batch rule",
                rows_per_program_used=rule.rows_per_program)


_UNIT_WORDS = {"%": "%", "register/thread": "", "cycle": " cycles", "byte": " bytes"}


def _metric_text(value, unit) -> str:
    """An ncu value with its unit as prose writes it: "87.2 %" -> "87.2%", "29 register/thread"
    -> "29" (the label says per thread), "24.7 cycle" -> "24.7 cycles"."""
    unit = (unit or "").strip()
    return f"{value}{_UNIT_WORDS.get(unit, ' ' + unit if unit else '')}"


def historical_seed() -> dict:
    """The seed chapter's RX 9070 XT table (historical evidence, not measured here), in µs."""
    doc = records.load("seed003_rmsnorm", "rx9070xt")
    recs = [dict(r, median_us=1e3 * r["median_ms"], min_median_us=1e3 * r["min_median_ms"],
                 max_median_us=1e3 * r["max_median_ms"]) for r in doc["records"]]
    prov = dict(doc["provenance"])
    prov["source"] = historical_source(prov.get("source", ""))
    return {"provenance": prov, "records": recs}


def historical_source(text: str) -> str:
    """The historical table's source as a reader reads it: no machine paths, no archive number
    ("seed 003, section 13.5: chapter 13 'X' of a course, ..." -> "chapter 13 'X' of a course,
    section 13.5, ...")."""
    text = re.sub(r"\s*\(/[^)]*\)", "", text)  # no machine paths
    text = re.sub(r"^\s*seed \d+,\s*", "", text)
    moved = re.match(r"(section [\d.]+): (chapter \d+ .*? of [^,]+)(.*)$", text)
    return f"{moved[2]}, {moved[1]}{moved[3]}" if moved else text


def not_timed_at(grid: dict | None, **where) -> list[str]:
    """The implementations a grid lists at one case (``sweep``, ``rows``, ``cols``, ``dtype``)
    that were not timed there: skipped or failed, never silently absent from a table."""
    recs = [r for r in (grid or {}).get("records", [])
            if all(r.get(k) == v for k, v in where.items())]
    timed = {r["impl"] for r in recs if r.get("status") == "ok"}
    return sorted({r["impl"] for r in recs if r.get("status") != "ok"
                   and not str(r.get("status", "")).startswith("unsupported")} - timed)


# The shapes each rule is measured at (add_rmsnorm, bf16). SMOKE_RULE_SHAPES: the same code paths,
# tiny sizes (the record command's --smoke and the CPU test).
RULE_SHAPES = {
    "synchronize": [(rows, 8192) for rows in (1024, 4096, 16384, 65536)],
    "warm-up": [(4096, 4096)],
    # bytes moved: 3, 13, 25, 50, 101, 403 MB; the H200's L2 holds 60 MiB
    "L2": [(rows, 4096) for rows in (128, 512, 1024, 2048, 4096, 16384)],
    "graph": [(1, 2048), (1, 4096), (64, 4096)],
}
SMOKE_RULE_SHAPES = {
    "synchronize": [(8, 256), (64, 256)],
    "warm-up": [(8, 256)],
    "L2": [(8, 256), (64, 256)],
    "graph": [(1, 256)],
}
L2_DEMO_MB = (20, 40)  # the L2 rule's headline shape moves 20-40 MB: it fits in the L2


def process_spreads(grid: dict | None) -> dict:
    """Every cold case measured in two or more processes, with each process's median kept.

    ``outlier_us`` is the process median furthest from the median of medians: the number one
    unlucky process would have reported."""
    if grid is None:
        raise RuntimeError("needs the grid's per-process medians (pass --grid FILE)")
    rows = [r for r in grid["records"] if r.get("status") == "ok"
            and len(r.get("process_medians_us", [])) >= 2 and r.get("mode") == "cold"]
    if not rows:
        raise RuntimeError("the grid holds no case measured in two or more processes")
    cases = []
    for r in rows:
        m, mid = r["process_medians_us"], r["median_us"]
        outlier = max(m, key=lambda v: abs(v - mid))
        cases.append(dict({k: r[k] for k in ("impl", "op", "rows", "cols", "dtype")},
                          median_us=mid, process_medians_us=list(m), outlier_us=outlier,
                          outlier_ratio=outlier / mid,
                          across_pct=100 * (max(m) - min(m)) / mid,
                          within_pct=100 * (r["p90_us"] - r["p10_us"]) / mid))
    worst = max(cases, key=lambda c: abs(c["outlier_ratio"] - 1))
    med = statistics.median
    return dict(cases=len(cases), all_cases=cases,
                median_across_process_spread_pct=med(c["across_pct"] for c in cases),
                median_within_process_p10_p90_pct=med(c["within_pct"] for c in cases),
                worst=worst, worst_across_pct=worst["across_pct"],
                cases_over_5pct=sum(abs(c["outlier_ratio"] - 1) > 0.05 for c in cases),
                ignored={"what": "one process: the outlier process of the worst case",
                         "median_us": worst["outlier_us"]},
                followed={"what": "median of process medians", "median_us": worst["median_us"]})


def measure_timing_rules(grid: dict | None = None, log=print, smoke: bool = False) -> list[dict]:
    """Each rule of GPU timing, measured once kept and once ignored (GPU only).

    ``smoke``: the same steps at :data:`SMOKE_RULE_SHAPES` with few repetitions."""
    import torch

    from .. import registry
    from ..measure import timer

    env.require_gpu("Measuring the timing rules")
    shapes = SMOKE_RULE_SHAPES if smoke else RULE_SHAPES
    reps = 5 if smoke else 50
    out = []

    def step(rule, fn):
        t0 = time.time()
        try:
            rec = fn()
            rec["status"] = "ok"
        except Exception as e:  # noqa: BLE001 - one broken rule must not hide the others
            rec = {"status": f"error: {type(e).__name__}: {e}"[:500]}
        rec = {"rule": rule, **rec, "seconds": round(time.time() - t0, 1)}
        log(f"rule {rule}: {rec['status']} ({rec['seconds']} s)")
        out.append(rec)

    target = pick_target("add_rmsnorm")
    impl = registry.get(target)
    med = statistics.median
    bf16 = dtypes.torch_dtype("bf16")

    def nbytes(rows, cols):
        try:
            return floor_bytes("add_rmsnorm", rows, cols, "bf16")
        except FloorUnavailable:
            return None

    def synchronize():
        res = []
        for rows, cols in shapes["synchronize"]:
            args = make_inputs("add_rmsnorm", rows, cols, bf16)
            call = lambda a=args: impl.fn(*a)  # noqa: E731
            for _ in range(5):
                call()
            torch.cuda.synchronize()
            no_sync, with_sync = [], []
            for _ in range(20):
                t0 = time.perf_counter()
                call()
                no_sync.append((time.perf_counter() - t0) * 1e6)
                torch.cuda.synchronize()
            for _ in range(20):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                call()
                torch.cuda.synchronize()
                with_sync.append((time.perf_counter() - t0) * 1e6)
            events = med(timer.time_gpu(call, warmup=5, reps=20, l2="warm", hold=True))
            res.append(dict(rows=rows, cols=cols, dtype="bf16", bytes=nbytes(rows, cols),
                            no_sync_us=med(no_sync), sync_us=med(with_sync), events_us=events))
            del args
        big = res[-1]
        return dict(impl=target, shapes=res,
                    ignored={"what": "CPU clock around the call, no synchronize",
                             "median_us": big["no_sync_us"]},
                    followed={"what": "device events (warm L2, GPU held before each call)",
                              "median_us": big["events_us"]},
                    also={"what": "CPU clock with synchronize before and after",
                          "median_us": big["sync_us"]})

    def warmup():
        rows, cols = shapes["warm-up"][0]
        dt = "fp16"
        args = make_inputs("add_rmsnorm", rows, cols, dtypes.torch_dtype(dt))
        res = {"impl": target, "rows": rows, "cols": cols, "dtype": dt,
               "triton_cache": "empty" if os.environ.get("TRITON_CACHE_DIR") else "default"}
        first, _ = _sync_wall_ms(lambda: impl.fn(*args))
        samples = timer.time_gpu(lambda: impl.fn(*args), warmup=10, reps=30, l2="warm")
        with_first = [first * 1e3] + samples
        res.update(ignored={"what": "first call, timed with synchronize (includes JIT compile "
                                    "or load from the on-disk cache, and launch setup)",
                            "median_us": first * 1e3},
                   followed={"what": "median after 10 warm-up calls (device events, warm L2)",
                             "median_us": med(samples)},
                   mean_with_first_us=statistics.fmean(with_first),
                   median_with_first_us=med(with_first),
                   ratio=first * 1e3 / med(samples))
        if not smoke and any(i.name == "torch.compile_add"
                             for i in registry.impls("add_rmsnorm")):
            comp = registry.get("torch.compile_add")
            c_first, _ = _sync_wall_ms(lambda: comp.fn(*args))
            c_med = med(timer.time_gpu(lambda: comp.fn(*args), warmup=5, reps=20, l2="warm"))
            res["compile"] = {"impl": "torch.compile_add", "first_call_us": c_first * 1e3,
                              "median_us": c_med, "ratio": c_first * 1e3 / c_med}
        return res

    def l2():
        # One call per graph replay on both sides, the GPU held before each: warm and cold
        # differ only in whether the inputs are still in L2.
        res = []
        for rows, cols in shapes["L2"]:
            args = make_inputs("add_rmsnorm", rows, cols, bf16)
            call = lambda a=args: impl.fn(*a)  # noqa: E731
            warm = med(timer.time_gpu(call, warmup=10, reps=reps, l2="warm", hold=True,
                                      graph=True, graph_calls=1))
            cold = med(timer.time_gpu(call, warmup=10, reps=reps, l2="cold", graph=True))
            res.append(dict(rows=rows, cols=cols, dtype="bf16", bytes=nbytes(rows, cols),
                            warm_us=warm, cold_us=cold, cold_over_warm=cold / warm))
            del args
        in_band = [r for r in res if r["bytes"] and
                   L2_DEMO_MB[0] * 1e6 <= r["bytes"] <= L2_DEMO_MB[1] * 1e6]
        head = in_band[0] if in_band else res[len(res) // 2]
        return dict(impl=target, shapes=res, headline=head, l2_bytes=timer.l2_bytes(),
                    warm_method=timer.l2_method("warm", graph=True, hold=True, graph_calls=1),
                    cold_method=timer.l2_method("cold", graph=True),
                    ignored={"what": "warm L2 (inputs left in L2 by the previous call)",
                             "median_us": head["warm_us"]},
                    followed={"what": "cold L2 (flushed before every call)",
                              "median_us": head["cold_us"]})

    def graph():
        # What a graph changes: one call held and timed alone (plain or replayed), and calls
        # back to back (launched one by one, or GRAPH_CALLS inside one replay).
        res = []
        names = [target] + [n for n in ("torch.eager_chain",) if n != target
                            and any(i.name == n for i in registry.impls("add_rmsnorm"))]
        for name in names:
            f = registry.get(name).fn
            for rows, cols in shapes["graph"]:
                args = make_inputs("add_rmsnorm", rows, cols, bf16)
                call = lambda f=f, a=args: f(*a)  # noqa: E731
                t = lambda **kw: med(timer.time_gpu(call, warmup=10, reps=reps, **kw))  # noqa: E731
                res.append(dict(impl=name, rows=rows, cols=cols, dtype="bf16",
                                cold_us=t(l2="cold"), cold_graph_us=t(l2="cold", graph=True),
                                held_us=t(l2="warm", hold=True),
                                held_graph_us=t(l2="warm", hold=True, graph=True, graph_calls=1),
                                back_to_back_us=t(l2="warm"),
                                graph_back_to_back_us=t(l2="warm", graph=True)))
        head = res[0]
        return dict(impls=res, graph_calls=timer.GRAPH_CALLS,
                    ignored={"what": f"{target} launched call by call, back to back "
                                     f"({head['rows']}x{head['cols']} bf16)",
                             "median_us": head["back_to_back_us"]},
                    followed={"what": f"{target}, {timer.GRAPH_CALLS} calls per graph replay",
                              "median_us": head["graph_back_to_back_us"]})

    step("synchronize", synchronize)
    step("warm-up", warmup)
    if smoke:  # one process per case: there is no spread across processes to show
        out.append({"rule": "processes", "status": "skipped: a smoke run times each case in one "
                    "process", "seconds": 0.0})
        log("rule processes: skipped (a smoke run times each case in one process)")
    else:
        step("processes", lambda: process_spreads(grid))
    step("L2", l2)
    step("graph", graph)
    return out


# ---------------------------------------------------------------- the chapter's recording

FILES = {
    "bench_grid.json": "the harness's h200 plan: every kernel and peer, 3 processes each",
    "bench_grid.csv": "the same grid as a table",
    "timing_rules.json": "each timing rule, measured kept and ignored",
    "ncu_summary.json": "Nsight Compute at the tuned configuration (or why it could not run)",
    "ncu_raw.txt": "the tail of ncu's own output",
    "bench_plot.png": "bandwidth and % of the copy floor by shape (PNG)",
    "bench_plot.svg": "the same chart (SVG)",
}
# From 64 MB a call (where the capstone's goal is 90% of the copy floor), each timing process
# also times the floor's copy of the call's bytes at that size: a share of the 1 GiB copy the
# capstone misses there is a share the copy may miss too. The smoke run copies its small shapes.
COPY_AT_SIZE_MIN_BYTES = 64 * 10**6
SMOKE_QUIET_WAIT_S = 0.02  # the smoke run's wait for a quiet memory system, at most


def timing_settings(timeout_s: float, smoke: bool = False) -> harness.Settings:
    """The harness's settings for a recording's timing run (chapter 6's grid, chapter 7's peers):
    3 processes (1 in the smoke run), a hard limit per process, copies at size from
    :data:`COPY_AT_SIZE_MIN_BYTES` (every size in the smoke run). The smoke run probes for a quiet
    memory system but hardly waits: the GPU check runs it beside the gpu-marked tests."""
    return harness.Settings(processes=1 if smoke else 3, timeout_s=timeout_s,
                            allow_missing_floor=True,
                            copy_at_size_min_bytes=1 if smoke else COPY_AT_SIZE_MIN_BYTES,
                            quiet_wait_s=(SMOKE_QUIET_WAIT_S if smoke
                                          else harness.Settings.quiet_wait_s))


GRID_TIMEOUT_S = 300  # per timing process: a hard limit for a hung case, far above its ~60 s
# H200 at eceb0b6: 470 s with chapter 7's peers in its grid (330 s at 347eb14): each of the three
# timing processes spent 70-76 s of its ~130 s on rotating timings, since a rotation moves 4x L2
# a pass (15,360 calls at one row of 2,048 columns, where 200 were the cap), and 38-41 s on first
# calls and checks. With chapter 7 that no longer fits one device call (record --list). The
# copies at size add about 35 sizes x 3 processes of a few tenths of a second (an estimate).
ESTIMATE_S = 490
SOURCES = ("tuning/h200/capstone.json", "tuning/h200/fp8.json", "kernels/rmsnorm.py",
           "kernels/add_rmsnorm.py", "kernels/add_rmsnorm_chunked.py",
           "kernels/add_rmsnorm_split.py", "kernels/add_rmsnorm_exchange.py",
           "kernels/rmsnorm_fp8.py",
           "kernels/rmsnorm_fp8_config.py", "kernels/rmsnorm_fp8_lean.py",
           "kernels/rmsnorm_fp8_spec.py",
           "kernels/direct_launch.py", "kernels/rounding.py", "kernels/peers.py",
           "kernels/peers_flashinfer.py", "kernels/flashinfer_norm.cu",
           "kernels/hip/rmsnorm.hip", "kernels/hip/kernels.py", "measure/timer.py",
           "measure/harness.py", "measure/worker.py", "measure/ncu.py", "measure/plots.py",
           "traffic.py", "registry.py", "book/ch06.py::record")
NCU_SHAPE = ("add_rmsnorm", 16384, 8192, "bf16")  # the capstone at its tuned configuration


def config_in_use(impl_name: str, rows: int, cols: int, dt: str) -> dict | None:
    """The launch configuration the capstone wrapper picks at this shape (what ncu profiled)."""
    if not impl_name.startswith("capstone."):
        return None
    import torch

    from ..kernels import add_rmsnorm as k

    device = torch.device("cuda")
    cfg, source = k.config_and_source(rows, cols, dtypes.torch_dtype(dt), device,
                                      write_sum=impl_name.endswith("residual"))
    rpp, programs = k.grid_size(cfg, rows, k.sm_count(device))
    return dict(cfg.as_dict(), label=cfg.label(), source=source, rows_per_program_used=rpp,
                programs=programs)


SMOKE_SWEEPS = [harness.Sweep("smoke", "add_rmsnorm", (1024,), (4096,), ("bf16",))]


def record(out_dir, tune: bool = False, log=print, smoke: bool = False,
           run: dict | None = None) -> list[Path]:
    """Chapter 6 on the GPU: grid, rules, profile, chart; each step fails on its own.
    ``smoke``: one shape in one process; the rules and the profile are skipped (logged).
    ``run``: the recording this is part of (``id``, ``chapters``); when it records chapter 7 too,
    the grid's processes also time chapter 7's peers (one warm-up, the shared cases once)."""
    env.require_gpu("recording chapter 6")
    out_dir = Path(out_dir)
    failed = []
    grid_path = out_dir / "bench_grid.json"
    settings = timing_settings(GRID_TIMEOUT_S, smoke)
    steps = []

    def grid():
        documents = {"grid": (SMOKE_SWEEPS if smoke else harness.PLANS["h200"], grid_path)}
        if run and "ch07" in run["chapters"]:
            from . import ch07

            documents["peers"] = (ch07.peer_sweeps(smoke), out_dir / ch07.PEERS_FILE)
        docs = harness.run_documents(documents, settings, log=log,
                                     provenance={"run_id": run["id"]} if run else None)
        harness.require_complete(docs["grid"], "chapter 6's grid")

    def rules():
        # An empty Triton cache, so that the warm-up rule's first call includes a real JIT.
        before = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="fusedrms_rules_triton_")
        try:
            doc = harness.load(grid_path) if grid_path.exists() else None
            got = measure_timing_rules(doc, log=log, smoke=smoke)
        finally:
            if before is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = before
        records.write(out_dir / "timing_rules.json", got)

    def profile():
        op, rows, cols, dt = NCU_SHAPE
        s = ncu.profile_with_ncu(None, op, rows, cols, dt, timeout_s=180, log=log)
        try:
            s["config"] = config_in_use(s.get("impl") or "", rows, cols, dt)
        except Exception as e:  # noqa: BLE001 - the profile itself is still worth keeping
            s["config"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        records.write(out_dir / "ncu_summary.json", [s])
        (out_dir / "ncu_raw.txt").write_text(s.get("raw_tail", s.get("reason", "")) + "\n")
        log(f"ncu: {s['status']}" + (f" ({s.get('reason')})" if s.get("reason") else ""))

    def chart():
        plots.plot_file(grid_path, out_dir / "bench_plot")

    steps = (("grid", grid), ("rules", rules), ("ncu", profile), ("plot", chart))
    if smoke:
        log("ch06 smoke: the timing rules at tiny sizes; the Nsight Compute profile is skipped")
        steps = (steps[0], steps[1], steps[3])
    for name, step in steps:
        t0 = time.time()
        try:
            step()
            log(f"ch06 {name}: ok ({time.time() - t0:.0f} s)")
        except Exception as e:  # noqa: BLE001 - the other steps still run
            import traceback

            log(traceback.format_exc())
            failed.append(f"{name} ({type(e).__name__}: {e})")
    written = [out_dir / f for f in FILES if (out_dir / f).exists()]
    if failed:
        raise RuntimeError(f"chapter 6 steps failed: {'; '.join(failed)}")
    return written
