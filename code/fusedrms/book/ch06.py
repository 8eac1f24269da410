"""Chapter 6's companion: the recorded benchmark grid, the timing rules measured kept and broken,
the Nsight Compute profile at the tuned configuration, the chart, and their readers.

``record(out_dir)`` writes ``bench_grid.json`` + ``bench_grid.csv`` (the harness's ``h200`` plan:
every registered kernel and peer, medians over 3 processes), ``timing_rules.json``,
``ncu_summary.json`` + ``ncu_raw.txt`` (skipped with the reason recorded when there is no ncu) and
``bench_plot.png`` + ``bench_plot.svg``.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from .. import dtypes, env, records
from ..measure import harness, ncu, plots
from ..measure.harness import (FloorUnavailable, _sync_wall_ms, floor_bytes, make_inputs,
                               pick_target)


def rule_summary(rule: dict) -> str:
    """One rule of the timing-rules file: the number with the rule ignored and kept."""
    if rule.get("status") != "ok":
        return f"{rule['rule']}: not measured ({rule.get('status')})"
    ign, fol = rule["ignored"], rule["followed"]
    ratio = ign["median_us"] / fol["median_us"] if fol["median_us"] else float("nan")
    return (f"{rule['rule']}:\n  ignored  {ign['median_us']:>10.2f} µs  {ign['what']}\n"
            f"  followed {fol['median_us']:>10.2f} µs  {fol['what']}\n"
            f"  ignored / followed = {ratio:.3g}")


def find_rule(doc: dict | None, name: str) -> dict | None:
    for r in (doc or {}).get("records", []):
        if r.get("rule") == name:
            return r
    return None


def print_rule(recorded_doc: dict | None, live: list[dict] | None, name: str) -> None:
    """A rule as recorded (with provenance) and, when this machine has a GPU, as measured now."""
    rec = find_rule(recorded_doc, name)
    if rec is None:
        print(f"recorded: no '{name}' measurement in the recorded timing rules yet")
    else:
        print(f"recorded ({records.describe(recorded_doc)}):")
        print(rule_summary(rec))
    if live is not None:
        mine = find_rule({"records": live}, name)
        print(f"\nthis machine, just now:\n{rule_summary(mine) if mine else 'not measured'}")


def verdict(recs: list[dict], target_pct: float = 85.0) -> str:
    """Whether every record reaches ``target_pct`` of its floor, and the worst gap."""
    priced = [r for r in recs if r.get("pct_of_floor") is not None]
    if not priced:
        return f"target >= {target_pct:.0f}% of floor: no data"
    worst = min(priced, key=lambda r: r["pct_of_floor"])
    met = worst["pct_of_floor"] >= target_pct
    return (f"target >= {target_pct:.0f}% of floor over {len(priced)} cases: "
            f"{'met' if met else 'not met'}; worst {worst['pct_of_floor']:.1f}% at "
            f"{worst['rows']}x{worst['cols']} {worst['dtype']}"
            + ("" if met else f", gap {target_pct - worst['pct_of_floor']:.1f} points"))


def classify(recs: list[dict], floor_pct: float = 85.0, flat: float = 2.0) -> list[dict]:
    """Label each measured record of one implementation by the regime the chart shows.

    ``launch-bound``: within ``flat`` x of the implementation's fastest time (the time barely
    grows with the data); ``on the floor``: at least ``floor_pct`` of the floor; otherwise
    ``in between`` (per-row latency, too few rows to fill the GPU, or a slow kernel).
    """
    ok = [r for r in recs if r.get("status") == "ok" and r.get("median_us")]
    if not ok:
        return []
    fastest = min(r["median_us"] for r in ok)
    out = []
    for r in sorted(ok, key=lambda r: r.get("bytes") or 0):
        pct = r.get("pct_of_floor")
        if pct is not None and pct >= floor_pct:
            label = "on the floor"
        elif r["median_us"] <= flat * fastest:
            label = "launch-bound"
        else:
            label = "in between"
        out.append({**r, "regime": label})
    return out


def historical_seed() -> dict:
    """The seed chapter's RX 9070 XT table (historical evidence, not measured here), in µs."""
    doc = records.load("seed003_rmsnorm", "rx9070xt")
    recs = [dict(r, median_us=1e3 * r["median_ms"], min_median_us=1e3 * r["min_median_ms"],
                 max_median_us=1e3 * r["max_median_ms"]) for r in doc["records"]]
    return {"provenance": doc["provenance"], "records": recs}


def measure_timing_rules(grid: dict | None = None, log=print) -> list[dict]:
    """Each rule of GPU timing, measured once kept and once ignored (GPU only)."""
    import torch

    from .. import registry
    from ..measure import timer

    env.require_gpu("Measuring the timing rules")
    out = []

    def step(rule, fn):
        t0 = time.time()
        try:
            rec = fn()
            rec["status"] = "ok"
        except Exception as e:  # noqa: BLE001 - one broken rule must not hide the others
            rec = {"status": f"error: {type(e).__name__}: {e}"[:500]}
        rec = {"rule": rule, **rec}
        log(f"rule {rule}: {rec['status']} ({time.time() - t0:.1f} s)")
        out.append(rec)

    target = pick_target("add_rmsnorm")
    impl = registry.get(target)
    med = lambda xs: statistics.median(xs)  # noqa: E731

    def synchronize():
        rows, cols, dt = 16384, 8192, "bf16"
        args = make_inputs("add_rmsnorm", rows, cols, dtypes.torch_dtype(dt))
        call = lambda: impl.fn(*args)  # noqa: E731
        for _ in range(5):
            call()
        torch.cuda.synchronize()
        no_sync = []
        for _ in range(20):
            t0 = time.perf_counter()
            call()
            no_sync.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
        with_sync = []
        for _ in range(20):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()
            with_sync.append((time.perf_counter() - t0) * 1e6)
        events = timer.time_gpu(call, warmup=5, reps=20, l2="warm")
        return dict(impl=target, rows=rows, cols=cols, dtype=dt,
                    ignored={"what": "CPU clock around the call, no synchronize",
                             "median_us": med(no_sync)},
                    followed={"what": "device events (warm L2)", "median_us": med(events)},
                    also={"what": "CPU clock with synchronize before and after",
                          "median_us": med(with_sync)},
                    ratio=med(events) / med(no_sync))

    def warmup():
        rows, cols, dt = 4096, 4096, "fp16"
        args = make_inputs("add_rmsnorm", rows, cols, dtypes.torch_dtype(dt))
        res = {"impl": target, "rows": rows, "cols": cols, "dtype": dt,
               "triton_cache": os.environ.get("TRITON_CACHE_DIR", "default")}
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
        if any(i.name == "torch.compile_add" for i in registry.impls("add_rmsnorm")):
            comp = registry.get("torch.compile_add")
            c_first, _ = _sync_wall_ms(lambda: comp.fn(*args))
            c_med = med(timer.time_gpu(lambda: comp.fn(*args), warmup=5, reps=20, l2="warm"))
            res["compile"] = {"impl": "torch.compile_add", "first_call_us": c_first * 1e3,
                              "median_us": c_med, "ratio": c_first * 1e3 / c_med}
        return res

    def processes():
        if grid is None:
            raise RuntimeError("needs the grid's per-process medians (pass --grid FILE)")
        rows = [r for r in grid["records"] if r.get("status") == "ok"
                and len(r.get("process_medians_us", [])) >= 2 and r["mode"] == "cold"]
        if not rows:
            raise RuntimeError("the grid holds no case measured in two or more processes")
        spreads = []
        for r in rows:
            m = r["process_medians_us"]
            across = (max(m) - min(m)) / r["median_us"]
            within = (r["p90_us"] - r["p10_us"]) / r["median_us"]
            spreads.append((across, within, r))
        worst = max(spreads, key=lambda t: t[0])
        return dict(cases=len(spreads),
                    median_across_process_spread_pct=100 * med([s[0] for s in spreads]),
                    median_within_process_p10_p90_pct=100 * med([s[1] for s in spreads]),
                    worst={k: worst[2][k] for k in ("impl", "op", "rows", "cols", "dtype",
                                                    "process_medians_us", "p10_us", "p90_us")},
                    worst_across_pct=100 * worst[0],
                    ignored={"what": "one process: the median of the worst case's fastest "
                                     "process", "median_us": min(worst[2]["process_medians_us"])},
                    followed={"what": "median of process medians", "median_us":
                              worst[2]["median_us"]})

    def l2():
        res = []
        for rows, cols, dt in ((1024, 4096, "bf16"), (16384, 8192, "bf16")):
            args = make_inputs("add_rmsnorm", rows, cols, dtypes.torch_dtype(dt))
            call = lambda a=args: impl.fn(*a)  # noqa: E731
            warm = med(timer.time_gpu(call, warmup=10, reps=50, l2="warm"))
            cold = med(timer.time_gpu(call, warmup=10, reps=50, l2="cold"))
            entry = dict(rows=rows, cols=cols, dtype=dt, warm_us=warm, cold_us=cold,
                         ratio=cold / warm, l2_method=timer.l2_method("cold"),
                         l2_bytes=timer.l2_bytes())
            try:
                entry["bytes"] = floor_bytes("add_rmsnorm", rows, cols, dt)
            except FloorUnavailable as e:
                entry["floor_error"] = str(e)
            res.append(entry)
        return dict(impl=target, shapes=res,
                    ignored={"what": "warm L2 at the shape that fits in L2",
                             "median_us": res[0]["warm_us"]},
                    followed={"what": "cold L2 (flushed) at that shape",
                              "median_us": res[0]["cold_us"]})

    def launch():
        res = []
        names = [target] + [n for n in ("torch.eager_chain",) if n != target]
        for name in names:
            f = registry.get(name).fn
            args = make_inputs("add_rmsnorm", 1, 4096, dtypes.torch_dtype("bf16"))
            call = lambda f=f, a=args: f(*a)  # noqa: E731
            warm = med(timer.time_gpu(call, warmup=10, reps=50, l2="warm"))
            graph = med(timer.time_gpu(call, warmup=10, reps=50, l2="warm", graph=True))
            res.append(dict(impl=name, rows=1, cols=4096, dtype="bf16", launched_us=warm,
                            graph_us=graph, ratio=warm / graph))
        return dict(impls=res,
                    ignored={"what": f"{target} launched call by call (warm, 1x4096 bf16)",
                             "median_us": res[0]["launched_us"]},
                    followed={"what": f"{target} in a CUDA graph ({timer.GRAPH_CALLS} calls per replay)",
                              "median_us": res[0]["graph_us"]})

    step("synchronize", synchronize)
    step("warm-up", warmup)
    step("processes", processes)
    step("L2", l2)
    step("launch overhead", launch)
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
GRID_BUDGET_S = 300  # the grid's soft budget: later cases are recorded as skipped, never dropped
ESTIMATE_S = GRID_BUDGET_S + 40 + 60 + 20  # grid, rules, ncu, plot
SOURCES = ("tuning/h200/capstone.json", "tuning/h200/fp8.json", "kernels/rmsnorm.py",
           "kernels/add_rmsnorm.py", "kernels/rmsnorm_fp8.py", "kernels/rounding.py",
           "kernels/peers.py", "kernels/hip/rmsnorm.hip", "kernels/hip/kernels.py",
           "measure/timer.py", "measure/harness.py", "measure/ncu.py", "measure/plots.py",
           "traffic.py", "registry.py", "book/ch06.py::record")
NCU_SHAPE = ("add_rmsnorm", 16384, 8192, "bf16")  # the capstone at its tuned configuration


SMOKE_SWEEPS = [harness.Sweep("smoke", "add_rmsnorm", (1024,), (4096,), ("bf16",))]


def record(out_dir, tune: bool = False, log=print, smoke: bool = False) -> list[Path]:
    """Chapter 6 on the GPU: grid, rules, profile, chart; each step fails on its own.
    ``smoke``: one shape in one process; the rules and the profile are skipped (logged)."""
    env.require_gpu("recording chapter 6")
    out_dir = Path(out_dir)
    failed = []
    grid_path = out_dir / "bench_grid.json"
    settings = (harness.Settings(processes=1, compile_processes=0, budget_s=15, allow_missing_floor=True)
                if smoke else
                harness.Settings(budget_s=GRID_BUDGET_S, compile_share=0.3, allow_missing_floor=True))
    steps = []

    def grid():
        harness.run_sweeps(SMOKE_SWEEPS if smoke else harness.PLANS["h200"], settings, grid_path)

    def rules():
        # An empty Triton cache, so that the warm-up rule's first call includes a real JIT.
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="fusedrms_rules_triton_")
        doc = harness.load(grid_path) if grid_path.exists() else None
        records.write(out_dir / "timing_rules.json", measure_timing_rules(doc, log=log))

    def profile():
        op, rows, cols, dt = NCU_SHAPE
        s = ncu.profile_with_ncu(None, op, rows, cols, dt, timeout_s=90, log=log)
        records.write(out_dir / "ncu_summary.json", [s])
        (out_dir / "ncu_raw.txt").write_text(s.get("raw_tail", s.get("reason", "")) + "\n")
        log(f"ncu: {s['status']}" + (f" ({s.get('reason')})" if s.get("reason") else ""))

    def chart():
        plots.plot_file(grid_path, out_dir / "bench_plot")

    steps = (("grid", grid), ("rules", rules), ("ncu", profile), ("plot", chart))
    if smoke:
        log("ch06 smoke: the timing rules and the Nsight Compute profile are skipped")
        steps = (steps[0], steps[3])
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
