"""Chapter 7's story values for its measured answer (section 6): the capstone and its peers as the
committed recording has them (the pattern: :mod:`fusedrms.book.story`)."""
from __future__ import annotations

import statistics

from .. import records
from . import ch07_results as CR
from .story import MISSING, value  # noqa: F401 (the notebook reads story.value)

BIG_MB = 64  # "where a call moves 64 MB or more"
SMALL_ROWS, LARGE_ROWS = 1024, 4096  # in place: "at 1024 rows or fewer", "from 4096 rows"


def load(machine: str | None = records.COMMITTED) -> dict:
    """The peers' recording of ``machine`` (the committed one by default; None: the recording
    this reader's page would show)."""
    doc, _ = CR.peers_doc(machine=machine)
    return {"peers": doc}


def story_facts(docs: dict) -> dict:
    """The numbers behind section 6's prose, unformatted (empty where nothing is recorded)."""
    from ..measure import compare

    doc = docs["peers"]
    points = CR.peer_points(doc)
    fused = CR.peer_rows(points, "add_rmsnorm", CR.peer_attempts(doc, "add_rmsnorm"))
    residual = CR.peer_rows(points, "add_rmsnorm_residual",
                            CR.peer_attempts(doc, "add_rmsnorm_residual"))
    if not (fused and residual):
        return {}
    band = compare.tie_band([r for r in doc.get("records", []) if r.get("mode") == "rotating"])
    complete = [r for r in fused if not r["missing"]]
    lost = [r for r in complete if band is not None and r["ratio"] > 1 + band]
    wide = [r for r in complete if CR.is_wide(r)]
    single = [r for r in complete if r["rows"] == 1]
    middle = [r for r in lost if r["rows"] > 1 and not CR.is_wide(r)]
    big_rs = [r for r in residual if r["MB"] >= BIG_MB and not r["missing"]]
    calls = CR.python_calls(doc, "add_rmsnorm_residual")
    return {
        "band": band, "fused": fused, "residual": residual,
        "fu_counts": CR.tie_counts(fused, band), "rs_counts": CR.tie_counts(residual, band),
        "fastest_peers": {r["peer"] for r in complete},
        "wide": wide, "wide_span": CR.ratio_span(fused, CR.is_wide),
        "single": single, "single_lost": [r for r in single if r in lost],
        "middle": middle, "worst_middle": max(middle, key=lambda r: r["ratio"], default=None),
        "big_rs": big_rs, "big_rs_peers": [r["peer"] for r in big_rs],
        "ip_small": CR.in_place_ratios(points, max_rows=SMALL_ROWS),
        "ip_large": CR.in_place_ratios(points, min_rows=LARGE_ROWS),
        "py_out": calls.get("capstone.fused_residual"),
        "py_in": calls.get("capstone.fused_residual_in_place"),
    }


def story_values(docs: dict) -> dict[str, str]:
    """Every value section 6's prose shows, formatted (absent where not recorded)."""
    f = story_facts(docs)
    if not f:
        return {}
    v: dict[str, str] = {}
    if f["band"] is not None:
        v["tie_band"] = f"±{100 * f['band']:.1f}%"
    for prefix, counts in (("fu", f["fu_counts"]), ("rs", f["rs_counts"])):
        if counts:
            v.update({f"{prefix}_{k}": str(counts[k]) for k in ("faster", "tie", "slower", "shapes")})
    if f["wide_span"]:
        v.update(wide_lo=CR.ratio_text(f["wide_span"][0]), wide_hi=CR.ratio_text(f["wide_span"][1]))
    if f["single"]:
        v.update(single_lo=f"{min(r['capstone_us'] for r in f['single']):.1f}",
                 single_hi=f"{max(r['capstone_us'] for r in f['single']):.1f} µs")
    if f["single_lost"]:
        v["single_gap"] = (f"{max(r['capstone_us'] - r['peer_us'] for r in f['single_lost']):.2f}"
                           " µs")
    v["mid_count"] = str(len(f["middle"]))
    if f["worst_middle"]:
        w = f["worst_middle"]
        v.update(mid_hi=CR.ratio_text(w["ratio"]), mid_at=CR.shape_text(w["rows"], w["cols"]))
    if f["big_rs"]:
        ratios = [r["ratio"] for r in f["big_rs"]]
        v.update(rs_big_median=CR.ratio_text(statistics.median(ratios)),
                 rs_big_max=CR.ratio_text(max(ratios)))
    if f["ip_small"]:
        v["ip_small_max"] = f"{100 * (f['ip_small'][-1] - 1):.0f}%"
    if f["ip_large"]:
        v["ip_large"] = f"{CR.ratio_text(f['ip_large'][0])} to {CR.ratio_text(f['ip_large'][-1])}"
    if f["py_out"] is not None and f["py_in"] is not None:
        v.update(py_out=f"{f['py_out']:.1f} µs", py_in=f"{f['py_in']:.1f} µs")
    return v
