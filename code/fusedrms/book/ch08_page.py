"""Chapter 8's page readers: the tables the notebook shows and the numbers its story tells
(:mod:`fusedrms.book.ch08_story`), made from the recorded files through :mod:`fusedrms.book.ch08`.
No measurement happens here."""
from __future__ import annotations

import re
from pathlib import Path

from ..kernels.rmsnorm_fp8_spec import HIDDEN_SIZE, n_blocks
from .ch08 import exactness_summary, instructions_per_element


def _holds_width(r: dict, cols: int = HIDDEN_SIZE) -> bool:
    """Whether a compiled variant (a row of :func:`instructions_per_element`) is the one for
    rows of ``cols``: the split tile holds the row's blocks, a padded one the next power of two."""
    nb = n_blocks(cols)
    return r["row_blocks"] == (nb if "split" in r["kernel"] else 1 << (nb - 1).bit_length())


def instruction_comparison(cost_doc: dict | None, fused_label: str | None) -> dict | None:
    """SASS instructions per element a thread handles, at the chapter's width: the exact kernel
    as ``fp8.fused`` ran (``fused_label``, the recording's configuration label, e.g. "warps 4,
    unpadded (split) tile, ...") beside the diagnostic kernel at the same number of warps. None
    when either variant is not in the recording."""
    if not cost_doc or not fused_label:
        return None
    words = fused_label.replace(",", " ").split()
    warps = next((int(n) for w, n in zip(words, words[1:]) if w == "warps" and n.isdigit()),
                 None)
    split = "split" in fused_label
    rows = [r for r in instructions_per_element(cost_doc) if r["per_element"]
            and r["num_warps"] == warps and _holds_width(r)]
    exact = next((r for r in rows if "approx" not in r["kernel"]
                  and ("split" in r["kernel"]) == split), None)
    approx = next((r for r in rows if "approx" in r["kernel"]), None)
    if not (exact and approx):
        return None
    return {"warps": warps, "exact": exact["per_element"], "approx": approx["per_element"],
            "exact_kernel": exact["kernel"], "approx_kernel": approx["kernel"]}


NCU_COLS = HIDDEN_SIZE  # the study profiles fp8 at 16384 rows of the chapter's width


def ncu_numbers(folder, name: str = "fp8_fused") -> dict | None:
    """What Nsight Compute measured on one kernel (``ncu_<name>.txt`` beside the recording):
    duration (µs), issue slots busy, SM (compute) and DRAM throughput (% of peak), achieved
    occupancy (%), the busiest pipe and its share, and instructions executed per element (warp
    instructions x 32 threads over rows x :data:`NCU_COLS`; rows from the launch grid, one
    program per row). None when there is no report."""
    from .study import parse_ncu_text

    path = Path(folder) / f"ncu_{name}.txt"
    if not path.exists():
        return None
    text = path.read_text()
    got = parse_ncu_text(text)
    out = {"duration_us": got.get("Duration"), "issue_busy_pct": got.get("Issue Slots Busy"),
           "sm_pct": got.get("Compute (SM) Throughput"), "dram_pct": got.get("DRAM Throughput"),
           "occupancy_pct": got.get("Achieved Occupancy"),
           "busiest_pipe": (got.get("busiest_pipe") or "").split()[-1] or None,
           "busiest_pipe_pct": got.get("busiest_pipe_pct")}
    grid = re.search(r"^\s+\S+ \((\d+), 1, 1\)x\((\d+), 1, 1\)", text, re.M)
    executed = re.search(r"^\s+Executed Instructions\s+inst\s+([\d,]+)\s*$", text, re.M)
    out["rows"] = int(grid.group(1)) if grid else None
    out["per_element"] = (int(executed.group(1).replace(",", "")) * 32 / (out["rows"] * NCU_COLS)
                          if grid and executed else None)
    return out


# version -> its name on the page (fused, naive, software rounding: the served contract)
EXACTNESS_VERSIONS = {"fused": "fp8.fused", "fused_baseline": "untuned baseline, exact contract",
                      "naive": "naive pair", "fused_software": "fp8.fused, software rounding",
                      "reordered_reference": "reordered formula, exact contract"}


def exactness_rows(doc: dict | None) -> list[dict]:
    """The exactness table for the page: one row per version with checks, plain names."""
    summary = exactness_summary(doc) if doc else {}
    return [{"version": EXACTNESS_VERSIONS.get(k, k), "checks": v["checks"],
             "bit-exact": v["exact"], "differing codes": v["differing_codes"],
             "codes compared": v["codes"]} for k, v in summary.items() if v["checks"]]


def cost_table(cost_rows: list[dict]) -> list[dict]:
    """One row per shape: the exact kernel as tuned, its untuned baseline, and the fastest
    diagnostic (which drops exactness), with µs, % of the copy floor and differing codes."""
    out = []
    for shape in dict.fromkeys((r["rows"], r["cols"]) for r in cost_rows):
        same = [r for r in cost_rows if (r["rows"], r["cols"]) == shape]
        exact = next((r for r in same if r["impl"] == "fp8.fused_exact"), None)
        base = next((r for r in same if r["impl"] == "fp8.fused_baseline"), None)
        approx = min((r for r in same if r["impl"].startswith("fp8.approx")),
                     key=lambda r: r["median_us"], default=None)
        out.append({"shape": f"{shape[0]}x{shape[1]}",
                    "exact µs": exact["median_us"] if exact else None,
                    "exact % of floor": exact["pct_of_floor"] if exact else None,
                    "baseline µs": base["median_us"] if base else None,
                    "diagnostic µs": approx["median_us"] if approx else None,
                    "diagnostic % of floor": approx["pct_of_floor"] if approx else None,
                    "diagnostic warps": int(approx["impl"].rsplit("_w", 1)[-1])
                    if approx and approx["impl"].rsplit("_w", 1)[-1].isdigit() else None,
                    "codes differing": approx["differing_codes"] if approx else None})
    return out


# chapter 8's price list (study_fp8.LEVERS): what each row of the table departs from
LEVER_NAMES = {
    "lever.none": "none: the specification",
    "lever.pairwise_sum": "fp32 sum, pairwise tree (stated)",
    "lever.any_order_sum": "fp32 sum, the compiler's order",
    "lever.rsqrt": "hardware rsqrt for r",
    "lever.reciprocal": "q = y × RN(448 / absmax) (stated)",
    "lever.pairwise_reciprocal": "pairwise sum + reciprocal (stated)",
    "lever.all_three": "all three: fp32 sum, rsqrt, reciprocal",
}


def lever_prices(cost_rows: list[dict]) -> list[dict]:
    """The exactness levers one at a time, per shape (study_fp8.LEVERS, on fp8.fused's unpadded
    kernel): µs (median of the interleaved rounds) and their spread, time against the
    specification's own kernel, % of the copy floor, codes that differ from the float64
    specification, and whether the departure equals its own stated specification bit for bit
    (None: it has none). ``cost_rows``: :func:`fusedrms.book.ch08.exactness_cost_rows`."""
    out = []
    for shape in dict.fromkeys((r["rows"], r["cols"]) for r in cost_rows):
        same = {r["impl"]: r for r in cost_rows if (r["rows"], r["cols"]) == shape}
        spec_row = same.get("lever.none")
        if not spec_row:
            continue
        for impl, name in LEVER_NAMES.items():
            r = same.get(impl)
            if not r:
                continue
            lo, hi = r["spread_us"] or (r["median_us"], r["median_us"])
            out.append({"rows": shape[0], "cols": shape[1], "impl": impl, "lever": name,
                        "us": r["median_us"], "spread": (lo, hi),
                        "round_count": r.get("round_count", 0),
                        "vs_spec": r["median_us"] / spec_row["median_us"],
                        "pct_of_floor": r["pct_of_floor"], "codes_moved": r["differing_codes"],
                        "own_spec_ok": r["own_spec_ok"]})
    return out


def lever_band(prices: list[dict]) -> float | None:
    """The tie band of the price list: the widest spread of any row's rounds, relative to its
    median (a lever moves the time only outside it)."""
    spreads = [(r["spread"][1] - r["spread"][0]) / r["us"] for r in prices if r["us"]]
    return max(spreads) if spreads else None


def lever_table(prices: list[dict], rows: int) -> list[dict]:
    """The page's rows of the price list at ``rows`` rows."""
    return [{"departure": r["lever"], "µs": r["us"],
             "spread µs": f"{r['spread'][0]:.1f}–{r['spread'][1]:.1f}",
             "× spec": r["vs_spec"], "% of floor": r["pct_of_floor"],
             "codes moved": r["codes_moved"],
             "own spec": {True: "bit-exact", False: "differs", None: "none stated"}[
                 r["own_spec_ok"]]}
            for r in prices if r["rows"] == rows]
