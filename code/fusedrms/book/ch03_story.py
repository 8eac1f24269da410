"""Chapter 3's story values: the numbers its Markdown quotes from the committed recording.

The chapter's prose is written about the committed H200 recording of the HIP ladder
(``hip_ladder.json``) and chapter 6's grid beside it. :func:`story_facts` reads the comparisons
the prose states in words (a test holds them against the committed recording, so a re-recording
that contradicts a sentence fails it) and :func:`story_values` formats the numbers the prose shows
inline (``{eval}`` roles).
"""
from __future__ import annotations

import math

from .. import records
from . import ch03 as ladder
from . import page
from .story import MISSING, beside, value  # noqa: F401 (the notebook reads story.value)


def load(machine: str | None = records.COMMITTED) -> dict:
    """The ladder and chapter 6's grid from ``machine``'s recording (None where missing)."""
    try:
        grid = records.load("bench_grid", machine)
    except FileNotFoundError:
        grid = None
    return {"ladder": ladder.load(machine), "grid": grid}


def _span(values, fmt: str = ".2f", unit: str = "×") -> str:
    return ladder.span(values, fmt, unit) or MISSING


def story_facts(docs: dict) -> dict:
    """The numbers behind the prose, unformatted ({} without a recorded ladder)."""
    doc, grid = docs["ladder"], docs["grid"]
    if not doc:
        return {}
    band = ladder.tie_band(grid)
    points = ladder.ladder_points(doc)
    gains = ladder.rung_gains(doc)
    provenance = doc.get("provenance") or {}
    out: dict = {"band": band, "points": points, "gpu": provenance.get("gpu"),
                 "sm_count": provenance.get("sm_count")}
    out["shuffle"] = ladder.shuffle_effect(points, band)
    correct = [p for p in points if p.get("correct") and p.get("fraction_of_floor")]
    out["floor"] = dict(correct=len(correct), over=sum(p["fraction_of_floor"] > 1 for p in correct),
                        best=max(correct, key=lambda p: p["fraction_of_floor"]) if correct else None)
    out["registers_gains"] = [g["gain"] for g in gains
                              if (g["from"], g["to"]) == ("hip.shuffle", "hip.registers")]
    out["vector_gains"] = [g["gain"] for g in gains
                           if (g["from"], g["to"]) == ("hip.registers", "hip.vectorized")]
    triton = {p["shape"]: p["median_us"] for p in points
              if p["name"] == "triton.row" and p.get("correct")}
    best: dict = {}
    for p in points:
        if p.get("correct") and p["name"] in ladder.FUSED_HIP:
            best[p["shape"]] = min(best.get(p["shape"], math.inf), p["median_us"])
    out["hip_vs_triton"] = [best[s] / triton[s] for s in triton if s in best]
    fusion = {}
    for f in ladder.fusion(doc):
        kind = "scalar" if f["loads"].startswith("scalar") else "vector"
        rate = f["speedup"] / f["bytes_ratio"]
        b = band or 0.0
        entry = fusion.setdefault(kind, {"speedups": [], "bytes": {}, "beat": 0, "match": 0,
                                         "short": 0})
        entry["speedups"].append(f["speedup"])
        entry["bytes"].setdefault(f["dtype"], f["bytes_ratio"])
        entry["beat" if rate > 1 + b else "short" if rate < 1 - b else "match"] += 1
    out["fusion"] = fusion
    out["serial_gains"] = {g["rows"]: g["gain"] for g in gains
                           if (g["from"], g["to"]) == ("hip.serial", "hip.block")
                           and "float32" in g["shape"]}
    blocks = ladder.sweep(doc, "block_size")
    serial = ladder.sweep(doc, "serial_block_size")
    if blocks:
        fastest = min(blocks, key=lambda p: p["median_us"])
        by_size = {p["block_size"]: p["median_us"] for p in blocks}
        out["blocks"] = dict(best=fastest["block_size"], best_us=fastest["median_us"],
                             smallest=min(by_size), largest=max(by_size),
                             smallest_x=by_size[min(by_size)] / fastest["median_us"],
                             largest_x=by_size[max(by_size)] / fastest["median_us"])
    costs = ladder._serial_costs(blocks, serial) if serial else None
    if costs:
        out["serial"] = dict(costs, quick_us=min(p["median_us"] for p in serial),
                             one_row_us=ladder.one_row_us(grid))
    return out


def story_values(docs: dict) -> dict[str, str]:
    """Every value the chapter's prose shows, formatted ({} without a recorded ladder)."""
    f = story_facts(docs)
    if not f:
        return {}
    v: dict[str, str] = {}
    doc = docs["ladder"]
    v["ladder_compiler"] = "hipcc" if doc["provenance"].get("hip") else "nvcc"
    v["ladder_shapes"] = str(len(ladder.ladder_shapes(doc)))
    v["ladder_sms"] = f"{f['sm_count']}" if f["sm_count"] else MISSING
    band = f["band"]
    v["hip_band"] = f"±{100 * band:.1f}%" if band is not None else MISSING
    shuffle = f["shuffle"]
    if shuffle:
        v["shuffle_range"] = _span([abs(e["change_pct"]) for e in shuffle], ".1f", "%").replace(
            "–", " to ")
        v["shuffle_shapes"] = f"{len(shuffle)}"
        v["shuffle_ties"] = page.counted(sum(e["verdict"] == "tie" for e in shuffle), "shape")
        v["shuffle_slower"] = page.counted(sum(e["verdict"] == "slower" for e in shuffle), "shape")
    fl = f["floor"]
    v["ladder_correct"] = f"{fl['correct']}"
    if fl["best"]:
        v["best_floor_pct"] = f"{100 * fl['best']['fraction_of_floor']:.0f}%"
        v["best_floor_where"] = f"{fl['best']['name']} at {fl['best']['shape']}"
    v["registers_gain"] = _span(f["registers_gains"])
    if f["registers_gains"] and band is not None:
        v["registers_slower"] = f"{sum(g < 1 - band for g in f['registers_gains'])}"
        v["registers_shapes"] = f"{len(f['registers_gains'])}"
    v["vector_gain"] = _span(f["vector_gains"])
    v["hip_vs_triton"] = _span(f["hip_vs_triton"])
    for kind, entry in f["fusion"].items():
        v[f"fusion_{kind}"] = _span(entry["speedups"])
        v[f"bytes_{kind}"] = " and ".join(f"{r:.2f}× for {d}" for d, r in entry["bytes"].items())
        v[f"{kind}_pairs"] = f"{len(entry['speedups'])}"
        v[f"{kind}_match"] = f"{entry['match']}"
    gains = f["serial_gains"]
    if gains:
        few, many = min(gains), max(gains)
        v["serial_gain_few"] = f"{gains[few]:.0f}×"
        v["serial_gain_many"] = f"{gains[many]:.1f}×"
        v["serial_many_blocks"] = f"{-(-many // ladder.serial_default_block())}"
    b = f.get("blocks")
    if b:
        v.update(best_block=f"{b['best']}", best_block_us=f"{b['best_us']:.1f} µs",
                 block_small_x=f"{b['smallest_x']:.2g}×", block_large_x=f"{b['largest_x']:.2g}×")
    s = f.get("serial")
    if s:
        v.update(serial_quick_blocks=f"{s['quick_blocks']:,}", serial_grid_x=f"{s['grid_x']:.1f}×",
                 serial_rest_x=f"{s['rest_x']:.2g}×" if s["rest_x"] else MISSING,
                 serial_quick_us=f"{s['quick_us']:,.0f} µs",
                 one_row_us=f"{s['one_row_us']:,.0f} µs" if s["one_row_us"] else MISSING)
    return v


def your_gpu_rows(own: dict, h200: dict) -> list[dict] | None:
    """The chapter's measured answers on the reader's GPU beside the H200's (None when the reader
    has not recorded the ladder)."""
    if not own["ladder"]:
        return None
    rows = [
        ("hip.block's speedup over hip.serial, 1024×4096 fp32",
         lambda f: f"{f['serial_gains'][1024]:.0f}×"),
        ("hip.registers' speedup over hip.shuffle (x read once)",
         lambda f: ladder.span(f["registers_gains"])),
        ("hip.vectorized's speedup over hip.registers (16-byte loads)",
         lambda f: ladder.span(f["vector_gains"])),
        ("best kernel, % of its copy floor's rate",
         lambda f: f"{100 * f['floor']['best']['fraction_of_floor']:.0f}%"),
        ("fusion's speedup, scalar loads",
         lambda f: ladder.span(f["fusion"]["scalar"]["speedups"])),
        ("fusion's speedup, 16-byte loads",
         lambda f: ladder.span(f["fusion"]["vector"]["speedups"])),
    ]
    return beside(rows, story_facts(own), story_facts(h200))
