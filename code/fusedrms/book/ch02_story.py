"""Chapter 2's story values: the numbers its Markdown quotes from the committed recording.

The measured half of chapter 2 is written about the committed H200 recording: the copy
(``traffic_bandwidth.json``'s rate, the book's one floor) with the roofline priced at it,
chapter 6's grid at 4096 x 4096 bf16 and chapter 7's kernel census. :func:`story_facts` reads
what the prose states in words (a test holds it against the committed recording) and
:func:`story_values` formats what it shows inline.
"""
from __future__ import annotations

from .. import records, traffic
from . import ch02 as companion
from .story import MISSING, beside, value  # noqa: F401 (the notebook reads story.value)

SHAPE = (4096, 4096, "bf16")


def load(machine: str | None = records.COMMITTED) -> dict:
    """The copy floor, chapter 6's grid and chapter 7's census from ``machine``'s recording."""
    out: dict = {"floor": None, "grid": None, "extra": None}
    try:
        out["floor"] = records.copy_floor(machine)
    except FileNotFoundError:
        pass
    for key, name in (("grid", "bench_grid"), ("extra", "capstone_extra")):
        try:
            out[key] = records.load(name, machine)
        except FileNotFoundError:
            pass
    return out


def _roofline(floor: records.CopyFloor) -> dict:
    """The roofline's designs at the chapter's shape, priced at ``floor`` and its data sheet's
    fp32 peak: how many there are, how many are memory-bound, the highest intensity and the
    ridges (this GPU's, and the lowest in the published table)."""
    ceil = companion.ceilings(floor)
    priced = [traffic.price(s, *SHAPE, ceil["bandwidth_GBps"], ceil["peak_tflops"])
              for s in companion.ROOFLINE_STEPS]
    return {"designs": len(priced), "memory_bound": sum(e.bound == "memory" for e in priced),
            "max_intensity": max(e.intensity for e in priced), "ridge": priced[0].ridge,
            "lowest_ridge": min(peak * 1000 / bw for bw, peak, _ in traffic.PUBLISHED.values())}


def story_facts(docs: dict) -> dict:
    """The numbers behind the prose, unformatted (a key is absent where its file is missing)."""
    out: dict = {}
    floor, grid, extra = docs["floor"], docs["grid"], docs["extra"]
    if floor:
        out["copy"] = floor
        out["roofline"] = _roofline(floor)
    if grid:
        try:
            out["best_pct"] = companion.best_pct_of_floor(grid, records.copy_floor(beside=grid))
        except FileNotFoundError:
            pass
        pair = companion.grid_pair(grid, companion.BASELINE, "capstone.fused", *SHAPE)
        if pair:
            out["pair"] = pair
    if extra:
        census = companion.kernel_times(extra, records.copy_floor(beside=extra))
        totals = companion.design_totals(census)
        if census and all(d in totals for d in (companion.BASELINE, *companion.FUSED)):
            out["census"] = census
            out["totals"] = totals
            out["gpu"] = extra["provenance"]["gpu"]
    return out


def story_values(docs: dict) -> dict[str, str]:
    """Every value the chapter's measured prose shows, formatted."""
    f = story_facts(docs)
    v: dict[str, str] = {}
    floor = f.get("copy")
    if floor:
        v["copy_rate"] = f"{floor.GBps:,.0f} GB/s"
        if floor.published_GBps:
            v["copy_share"] = f"{100 * floor.GBps / floor.published_GBps:.0f}%"
            v["sheet_rate"] = f"{floor.published_GBps:,.0f} GB/s"
    if f.get("best_pct") is not None:
        v["best_floor_pct"] = f"{f['best_pct']:.0f}%"
    pair = f.get("pair")
    if pair:
        slow, fast = pair[companion.BASELINE], pair["capstone.fused"]
        v.update(grid_processes=f"{fast.get('processes', 1)}",
                 grid_torch=f"{slow['median_us']:.1f} µs",
                 grid_torch_range=f"{slow['min_us']:.1f} to {slow['max_us']:.1f}",
                 grid_fused=f"{fast['median_us']:.1f} µs",
                 grid_fused_range=f"{fast['min_us']:.1f} to {fast['max_us']:.1f}",
                 grid_ratio=f"{slow['median_us'] / fast['median_us']:.2f}×")
    if "census" in f:
        totals, census = f["totals"], f["census"]
        base, fused, resid = (totals[n] for n in (companion.BASELINE, *companion.FUSED))
        first = next(r for r in census if r["design"] == companion.BASELINE)
        norm = next(r for r in census if r["design"] == companion.BASELINE
                    and r["kernel"] == "rmsnorm")
        v.update(census_gpu=f["gpu"], census_shape=f"{first['rows']} x {first['cols']} "
                                                   f"{first['dtype']}",
                 t_torch=f"{base['measured_us']:.1f} µs", t_fused=f"{fused['measured_us']:.1f} µs",
                 t_residual=f"{resid['measured_us']:.1f} µs",
                 x_fused=f"{base['measured_us'] / fused['measured_us']:.2f}×",
                 x_residual=f"{base['measured_us'] / resid['measured_us']:.2f}×",
                 pct_fused=f"{fused['pct_of_copy']:.0f}%", pct_residual=f"{resid['pct_of_copy']:.0f}%",
                 pct_torch=f"{base['pct_of_copy']:.0f}%", pct_norm=f"{norm['pct_of_copy']:.0f}%")
        chain = {r["kernel"]: r for r in census if r["design"] == companion.CHAIN}
        if companion.CHAIN in totals and {"add", "scale"} <= set(chain):
            v.update(t_chain=f"{totals[companion.CHAIN]['measured_us']:.1f} µs",
                     t_mul=f"{chain['scale']['measured_us']:.1f} µs",
                     pct_mul=f"{chain['scale']['pct_of_copy']:.0f}%",
                     t_add=f"{chain['add']['measured_us']:.1f} µs",
                     add_more=f"{100 * (chain['add']['row_trips'] / chain['scale']['row_trips'] - 1):.0f}%")
    return v


def _speedup(facts: dict, design: str) -> str:
    """PyTorch's two kernels' measured time over ``design``'s, in the census."""
    t = facts["totals"]
    return f"{t[companion.BASELINE]['measured_us'] / t[design]['measured_us']:.2f}×"


def your_gpu_rows(own: dict, h200: dict) -> list[dict] | None:
    """The chapter's measured answers on the reader's GPU beside the H200's (None when the
    reader's recording has neither the copy nor the kernel census)."""
    if not (own["floor"] or own["extra"]):
        return None
    fused, residual = companion.FUSED
    rows = [
        ("copy bandwidth (device to device)", lambda f: f"{f['copy'].GBps:,.0f} GB/s"),
        ("fused kernel's speedup over PyTorch's two", lambda f: _speedup(f, fused)),
        ("residual-writing kernel's speedup over PyTorch's two",
         lambda f: _speedup(f, residual)),
        ("fused kernel, % of the copy rate",
         lambda f: f"{f['totals'][fused]['pct_of_copy']:.0f}%"),
        ("PyTorch's two kernels, % of the copy rate",
         lambda f: f"{f['totals'][companion.BASELINE]['pct_of_copy']:.0f}%"),
    ]
    return beside(rows, story_facts(own), story_facts(h200))
