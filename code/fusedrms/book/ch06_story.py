"""Chapter 6's story values: the timing rules, the grid, the profile, the copy floor and the
appendix's comparison with the historical table, as the committed recording has them (the
pattern: :mod:`fusedrms.book.story`)."""
from __future__ import annotations

from .. import records, traffic
from . import ch06
from .ch06 import readable_us, times_in_words
from .story import MISSING, beside, rotating_warm_up, value  # noqa: F401 (value: the notebook)

LARGE_BYTES = 64e6  # the answer's shapes: calls that move at least this much


def _pct(x: float) -> str:
    return f"{x:.0f}%" if abs(x) >= 10 else f"{x:.1f}%"


def load(machine: str | None = records.COMMITTED) -> dict:
    """The three files the chapter reads (None where missing), from ``machine``'s recording
    (the committed one by default; None: the recording this reader's page would show)."""
    from ..measure import harness

    rules = harness.recorded("timing_rules", machine)
    grid = harness.recorded("bench_grid", machine)
    return {"rules": rules, "grid": records.at_copy_floor(grid) if grid else None,
            "ncu": harness.recorded("ncu_summary", machine),
            "floor": records.copy_floor_beside(rules) if rules else None}


def _plan(grid: dict | None) -> dict | None:
    """The recorded grid's plan: the rows and widths of its "grid" sweeps, its L2 and flush."""
    prov = (grid or {}).get("provenance", {})
    plans = [w for w in prov.get("sweeps", []) if w.get("name") == "grid" and w.get("rows")]
    if not plans:
        return None
    return dict(rows=sorted({r for w in plans for r in w["rows"]}),
                cols=sorted({c for w in plans for c in w["cols"]}),
                modes=sorted({m for w in plans for m in w.get("modes", [])}),
                l2_bytes=prov.get("l2_bytes"), flush_bytes=prov.get("flush_bytes"))


COOP_CASE = dict(sweep="rmsnorm", rows=1024, cols=4096, dtype="fp32")  # the historical table's


def _cooperation(grid: dict | None) -> dict | None:
    """The historical headline on the recorded GPU: one thread per row (hip.serial) against a
    block per row (hip.block) at the historical table's shape, beside the table's own ratio."""
    from ..measure import harness

    by = {r["impl"]: r["median_us"] for r in harness.select(grid, status="ok", **COOP_CASE)
          if r.get("median_us")} if grid else {}
    if "hip.serial" not in by or "hip.block" not in by:
        return None
    hist = {r["impl"].split(" (")[0]: r["median_us"] for r in ch06.historical_seed()["records"]}
    return dict(serial_us=by["hip.serial"], block_us=by["hip.block"],
                ratio=by["hip.serial"] / by["hip.block"],
                hist_ratio=hist["HIP serial"] / hist["HIP block"],
                untimed=ch06.not_timed_at(grid, **COOP_CASE))


def story_facts(docs: dict) -> dict:
    """The numbers behind the prose, unformatted (None where a file or a rule is missing)."""
    rules, grid, floor = docs["rules"], docs["grid"], docs["floor"]
    out: dict = {}
    out["plan"] = _plan(grid)
    out["coop"] = _cooperation(grid)
    sync = ch06.sync_rows(rules)
    if sync and floor:
        below = [r["rows"] for r in sync if r["no_sync_us"] < floor.us(r["bytes"])]
        out["sync"] = dict(
            rows=sync, lo=sync[0], hi=sync[-1], growth=sync[-1]["events_us"] / sync[0]["events_us"],
            no_sync_min=min(r["no_sync_us"] for r in sync),
            no_sync_max=max(r["no_sync_us"] for r in sync),
            below_rows=below, below_is_the_large_end=bool(below) and below == [
                r["rows"] for r in sync][len(sync) - len(below):],
            lowest_share=min(r["no_sync_us"] / floor.us(r["bytes"]) for r in sync))
    out["warm"] = ch06.warmup_view(rules)
    proc = ch06.process_view(grid)
    if proc:
        cold = [r for r in grid.get("records", []) if r.get("status") == "ok"
                and r.get("mode") == "cold"]
        counts = {len(r.get("process_medians_us") or []) for r in cold}
        out["proc"] = dict(proc, cold_cases=len(cold), process_counts=sorted(counts))
    l2 = ch06.l2_rows(rules)
    if l2:
        shapes, rule = l2
        out["l2"] = dict(head=rule["headline"], big=shapes[-1], l2_bytes=rule.get("l2_bytes"),
                         sizes=len(shapes))
    view = ch06.ncu_view(docs["ncu"])
    if view and view.get("status") == "ok" and view.get("bytes_write") is not None:
        model = traffic.price(traffic.OP_STEP["add_rmsnorm"], view["rows"], view["cols"],
                              view["dtype"]).bytes_written
        out["ncu"] = dict(view, model_written=model)
    graph = ch06.graph_rows(rules)
    if graph:
        mine = [r for r in graph if r["impl"] == graph[0]["impl"]]
        out["graph"] = dict(next((r for r in mine if r["rows"] == 1), mine[0]),
                            impls=sorted({r["impl"] for r in graph}),
                            shapes=len({(r["rows"], r["cols"]) for r in graph}))
    from ..measure.harness import pick_target

    out["floor"] = ch06.floor_summary(grid, pick_target("add_rmsnorm"), LARGE_BYTES)
    out["health"] = ch06.grid_health(grid, "grid")
    return out


def story_values(docs: dict) -> dict[str, str]:
    """Every value the chapter's prose shows, formatted ("not recorded" where missing)."""
    f = story_facts(docs)
    us = readable_us
    v: dict[str, str] = {}
    plan = f.get("plan")
    if plan:
        v.update(grid_rows_lo=f"{plan['rows'][0]:,}", grid_rows_hi=f"{plan['rows'][-1]:,}",
                 grid_cols_lo=f"{plan['cols'][0]:,}", grid_cols_hi=f"{plan['cols'][-1]:,}")
        if plan["l2_bytes"] and plan["flush_bytes"]:
            v.update(l2_mib=f"{plan['l2_bytes'] / 2**20:,.0f} MiB",
                     flush_mib=f"{plan['flush_bytes'] / 2**20:,.0f} MiB",
                     flush_over_l2=times_in_words(plan["flush_bytes"] / plan["l2_bytes"]))
    co = f.get("coop")
    if co:
        v.update(coop_serial=us(co["serial_us"]), coop_block=us(co["block_us"]),
                 coop_ratio=f"{co['ratio']:,.1f}", coop_hist_ratio=f"{co['hist_ratio']:,.1f}")
    s = f.get("sync")
    if s:
        v.update(sync_n=str(len(s["rows"])), sync_cols=f"{s['lo']['cols']:,}",
                 sync_rows_lo=f"{s['lo']['rows']:,}", sync_rows_hi=f"{s['hi']['rows']:,}",
                 sync_ev_lo=us(s["lo"]["events_us"]), sync_ev_hi=us(s["hi"]["events_us"]),
                 sync_growth=times_in_words(s["growth"]),
                 sync_nosync_min=us(s["no_sync_min"]), sync_nosync_max=us(s["no_sync_max"]),
                 sync_below_from=f"{s['below_rows'][0]:,}" if s["below_rows"] else MISSING,
                 sync_lowest=_pct(100 * s["lowest_share"]),
                 sync_sync_hi=us(s["hi"]["sync_us"]))
    w = f.get("warm")
    if w:
        v.update(warm_shape=w["shape"], warm_first=us(w["first_us"]),
                 warm_ratio=times_in_words(w["ratio"]), warm_median=us(w["warm_us"]),
                 warm_mean_with=us(w["mean_with_first_us"]),
                 warm_median_with=us(w["median_with_first_us"]),
                 compile_first=us(w.get("compile_first_us")),
                 compile_ratio=times_in_words(w["compile_ratio"]) if "compile_ratio" in w
                 else MISSING, compile_median=us(w.get("compile_warm_us")))
    p = f.get("proc")
    if p:
        worst = p["worst"]
        v.update(proc_cases=f"{p['cold_cases']:,}",
                 proc_n=" or ".join(str(n) for n in p["process_counts"]),
                 proc_spread=_pct(p["median_across_process_spread_pct"]),
                 proc_within=_pct(p["median_within_process_p10_p90_pct"]),
                 proc_over5=f"{p['cases_over_5pct']:,}",
                 proc_worst_case=(f"{worst['impl']} at {worst['rows']:,} x {worst['cols']:,} "
                                  f"{worst['dtype']}"),
                 proc_worst_out=us(worst["outlier_us"]), proc_worst_med=us(worst["median_us"]))
    c = f.get("l2")
    if c:
        head, big = c["head"], c["big"]
        v.update(l2_head_shape=f"{head['rows']:,} x {head['cols']:,}",
                 l2_head_mb=f"{head['bytes'] / 1e6:,.0f} MB", l2_warm=us(head["warm_us"]),
                 l2_cold=us(head["cold_us"]), l2_ratio=f"{head['cold_over_warm']:.2f}",
                 l2_big_mb=f"{big['bytes'] / 1e6:,.0f} MB",
                 l2_big_diff=_pct(100 * abs(big["cold_over_warm"] - 1)), l2_sizes=str(c["sizes"]))
    n = f.get("ncu")
    if n:
        v.update(dirty_shape=f"{n['rows']:,} x {n['cols']:,}",
                 dirty_written=f"{n['bytes_write'] / 1e6:,.1f} MB",
                 dirty_model=f"{n['model_written'] / 1e6:,.1f} MB",
                 dirty_short=f"{(n['model_written'] - n['bytes_write']) / 1e6:,.1f} MB",
                 ncu_duration=us(n.get("duration_us")),
                 ncu_dram=_pct(float(n["dram_throughput_pct"]))
                 if n.get("dram_throughput_pct") is not None else MISSING,
                 ncu_config=(n.get("config") or {}).get("label") or MISSING)
    g = f.get("graph")
    if g:
        v.update(graph_shapes=str(g["shapes"]), graph_shape=f"{g['rows']:,} x {g['cols']:,}",
                 graph_cold=us(g["cold_us"]),
                 graph_cold_graph=us(g["cold_graph_us"]), graph_held=us(g["held_us"]),
                 graph_held_graph=us(g["held_graph_us"]), graph_b2b=us(g["back_to_back_us"]),
                 graph_b2b_graph=us(g["graph_back_to_back_us"]),
                 graph_b2b_ratio=times_in_words(g["back_to_back_us"]
                                                / g["graph_back_to_back_us"]))
    fs = f.get("floor")
    if fs:
        v.update(floor_cases=f"{fs['cases']:,}", floor_median=f"{fs['median_pct']:.1f}%",
                 floor_min=f"{fs['min_pct']:.1f}%", floor_max=f"{fs['max_pct']:.1f}%",
                 floor_at_least=f"{fs['at_least']:,}")
    warm = rotating_warm_up(docs.get("grid"))
    if warm:
        v["rotating_warm"] = warm
    h = f.get("health")
    if h:
        v.update(health_cases=f"{h['cases']:,}", health_measured=f"{h['measured']:,}",
                 health_wrong=f"{h['wrong']:,}",
                 health_wrong_impls=", ".join(h["wrong_impls"]) or "none")
    return v


def your_gpu_rows(own: dict, h200: dict) -> list[dict] | None:
    """The chapter's headline numbers on the reader's GPU beside the H200's (None when the reader
    has not recorded chapter 6): the rules' effects and the answer."""
    if not own.get("rules") and not own.get("grid"):
        return None
    rows = [
        ("kernel time, smallest to largest size (device events)",
         lambda f: times_in_words(f["sync"]["growth"])),
        ("clock without a synchronize, at the largest size", lambda f: readable_us(
            f["sync"]["hi"]["no_sync_us"])),
        ("first call over the warmed median", lambda f: times_in_words(f["warm"]["ratio"])),
        ("spread of process medians (median case)",
         lambda f: _pct(f["proc"]["median_across_process_spread_pct"])),
        ("flushed over warm, inside the L2", lambda f: f"{f['l2']['head']['cold_over_warm']:.2f}"),
        ("fused kernel, median % of the copy floor (64 MB or more)",
         lambda f: f"{f['floor']['median_pct']:.1f}%"),
    ]
    return beside(rows, story_facts(own), story_facts(h200))
