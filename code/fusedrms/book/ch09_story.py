"""Chapter 9's story values: training steps against the peers, their memory, the backward alone,
its grid and dw's bits, as the committed recording has them (the pattern: :mod:`fusedrms.book.story`)."""
from __future__ import annotations

import math

from .. import records
from . import ch09_page as R
from . import page
from .ch09 import OPS, WIDE_SHAPES
from .story import MISSING, value  # noqa: F401 (the notebook reads story.value)

MEMORY_SHAPE = (16384, 8192, "bf16")  # the largest shape of the grid: where memory is scarce
PEAK_IMPLS = ("triton.two_stage", "liger", "liger.in_place", "torch.rms_norm", "torch.compile",
              "torch.eager")


def load(machine: str | None = records.COMMITTED) -> dict:
    """The file the measured sections read (None where missing), every floor at the book's copy
    floor (:func:`fusedrms.book.ch09_page.load`); ``machine=None``: this reader's recording."""
    return {"backward": R.load(machine)}


def _op(doc: dict, op: str, band: float) -> dict:
    v = R.verdict(doc, op)
    rows = v["rows"]
    lost = [r for r in rows if r["vs_fastest"] > 1 + band]
    eager = [r["torch.eager"] / r["triton.two_stage"] for r in rows
             if r["torch.eager"] and r["triton.two_stage"]]
    return {"verdict": v, "lost": lost,
            "large_lost": [r for r in lost if r["MB"] * 1e6 >= R.LARGE_BYTES],
            "worst": max(rows, key=lambda r: r["vs_fastest"]), "eager": eager,
            "pct_floor": [r["pct_floor"] for r in rows if r["pct_floor"] is not None]}


def _peaks(doc: dict, op: str) -> dict:
    rows, cols, dt = MEMORY_SHAPE
    return {r["impl"]: r["peak_MiB"] for r in doc.get("records", [])
            if r.get("kind") == "train" and r.get("op") == op and r.get("peak_MiB")
            and (r["rows"], r["cols"], r["dtype"]) == (rows, cols, dt)}


def _backward(doc: dict) -> dict | None:
    table = R.backward_table(doc) or []
    by = {(r["op"], r["design"], r["shape"]): r for r in table}
    plain = R.OP_NAMES["rmsnorm"]
    two = [r for r in table if r["op"] == plain and r["design"] == R.DESIGN_NAMES["two_stage"]]
    if not two:
        return None
    recompute = [by[(plain, R.DESIGN_NAMES["recompute_r"], r["shape"])]["us"] / r["us"]
                 for r in two if (plain, R.DESIGN_NAMES["recompute_r"], r["shape"]) in by]
    atomic = [by[(plain, R.DESIGN_NAMES["atomic"], r["shape"])]["us"] / r["us"]
              for r in two if (plain, R.DESIGN_NAMES["atomic"], r["shape"]) in by]
    unfetched = [by[(plain, R.DESIGN_NAMES["no_prefetch"], r["shape"])]["us"] / r["us"]
                 for r in two if (plain, R.DESIGN_NAMES["no_prefetch"], r["shape"]) in by]
    # one row per step against the tiles, per op: (ratio of times, the row of the tiles)
    one_row = {op: [(by[(op, R.DESIGN_NAMES["one_row"], r["shape"])]["us"] / r["us"], r)
                    for r in table if r["op"] == op and r["design"] == R.DESIGN_NAMES["two_stage"]
                    and (op, R.DESIGN_NAMES["one_row"], r["shape"]) in by]
               for op in (R.OP_NAMES[o] for o in OPS)}
    # the design the library ships (two-stage dw, r saved) of both ops, at 64 MB or more
    big = [r for r in table if r["MB"] * 1e6 >= R.LARGE_BYTES
           and r["design"] == R.DESIGN_NAMES["two_stage"]]
    return {"two_stage": two, "recompute": recompute, "atomic": atomic, "unfetched": unfetched,
            "one_row": one_row, "large": big, "large_pct": [r["pct_floor"] for r in big],
            "large_below_80": [r for r in big if r["pct_floor"] < 80],
            "large_lowest": min(big, key=lambda r: r["pct_floor"]) if big else None,
            "reduce": R.reduce_table(doc) or []}


def _peers_alone(doc: dict, band: float) -> dict:
    """Our backward alone over the fastest peer's backward alone, both ops, every shape."""
    rows = [r for op in OPS for r in R.backward_peers_table(doc, op) or []
            if r["vs_fastest"] is not None]
    return {"rows": rows, "faster": [r for r in rows if r["vs_fastest"] < 1 - band]}


def _wide(doc: dict) -> list[dict]:
    """Per op and row of :data:`~fusedrms.book.ch09.WIDE_SHAPES`: our backward alone as the rule
    launches it (dw first), the same launch with dw last, and the fastest peer's backward alone."""
    designs = {(r["op"], r["design"], r["shape"]): r for r in R.backward_table(doc) or []}
    out = []
    for op in OPS:
        peers = {r["shape"]: r for r in R.backward_peers_table(doc, op) or []}
        for rows, cols, dt in WIDE_SHAPES:
            shape = R.shape_text(rows, cols, dt)
            first, last = (designs.get((R.OP_NAMES[op], R.DESIGN_NAMES[d], shape))
                           for d in ("two_stage", "dw_last"))
            if not (first and last):
                continue
            peer = peers.get(shape, {})
            out.append({"op": op, "rows": rows, "cols": cols, "dtype": dt, "first": first["us"],
                        "last": last["us"], "pct_floor": first["pct_floor"],
                        "peer": peer.get("fastest_peer"), "vs_peer": peer.get("vs_fastest"),
                        "peer_us": peer.get(peer.get("fastest_peer")) if peer else None})
    return out


def _grid(doc: dict, band: float) -> list[dict]:
    """Per shape of the programs sweep: the fastest grid and the default rule's grid."""
    sweep = R.backward_table(doc, kind="programs") or []
    rule = {r["shape"]: r for r in R.backward_table(doc) or []
            if r["design"] == R.DESIGN_NAMES["two_stage"] and r["op"] == R.OP_NAMES["rmsnorm"]}
    out = []
    for shape in dict.fromkeys(r["shape"] for r in sweep):
        tried = [r for r in sweep if r["shape"] == shape]
        best = min(tried, key=lambda r: r["us"])
        chosen = next((r for r in tried if shape in rule and r["programs"] == rule[shape]["programs"]),
                      None)
        out.append({"shape": shape, "best": best, "rule": chosen,
                    "slowest": max(tried, key=lambda r: r["us"]),
                    "rule_within_band": bool(chosen) and chosen["us"] <= best["us"] * (1 + band)})
    return out


def story_facts(docs: dict) -> dict:
    """The numbers behind the prose, unformatted (empty without a recording)."""
    doc = docs.get("backward")
    if not doc or R.verdict(doc, "rmsnorm") is None:
        return {}
    band = R.tie_band(doc) or 0.0
    counts = [r["processes"] for r in doc.get("records", []) if "processes" in r]
    return {"band": band, "processes": min(counts) if counts else 0,
            "gpu": doc.get("provenance", {}).get("gpu"),
            **{op: _op(doc, op, band) for op in OPS},
            "peaks": {op: _peaks(doc, op) for op in OPS}, "backward": _backward(doc),
            "peers_alone": _peers_alone(doc, band),
            "grid": _grid(doc, band), "wide": _wide(doc),
            "determinism": {r["impl"]: r for r in R.determinism_rows(doc)}}


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x"


def _shape(r: dict) -> str:
    return f"{r['rows']:,} × {r['cols']:,}" + ("" if r["dtype"] == "bf16" else f" {r['dtype']}")


def _below(pct: float) -> str:
    """A share under a threshold, cut (not rounded) to 0.1: 79.97% reads "79.9%", never "80.0%"."""
    return f"{math.floor(pct * 10) / 10:.1f}%"


def story_values(docs: dict) -> dict[str, str]:
    """Every value the measured sections' prose shows, formatted (absent where not recorded)."""
    f = story_facts(docs)
    if not f:
        return {}
    v = {"ch9_processes": str(f["processes"]), "ch9_band": f"±{100 * f['band']:.1f}%"}
    for op, key in (("rmsnorm", "rms"), ("add_rmsnorm", "add")):
        o = f[op]
        verdict = o["verdict"]
        v.update({f"{key}_shapes": str(verdict["shapes"]), f"{key}_faster": str(verdict["faster"]),
                  f"{key}_tie": str(verdict["tie"]), f"{key}_slower": str(verdict["slower"]),
                  f"{key}_median": _x(verdict["median_ratio"]),
                  f"{key}_worst": _x(o["worst"]["vs_fastest"]),
                  f"{key}_worst_at": _shape(o["worst"]),
                  f"{key}_worst_peer": R.plain_name(o["worst"]["fastest_peer"]),
                  f"{key}_worst_us": f"{o['worst']['triton.two_stage']:.1f} µs"})
        if o["large_lost"]:
            v[f"{key}_large_worst"] = _x(max(r["vs_fastest"] for r in o["large_lost"]))
        if o["pct_floor"]:
            v[f"{key}_floor_max"] = f"{max(o['pct_floor']):.0f}%"
    eager = f["rmsnorm"]["eager"] + f["add_rmsnorm"]["eager"]
    v.update(eager_lo=f"{min(eager):.1f}x", eager_hi=f"{max(eager):.1f}x")
    lost = f["rmsnorm"]["lost"]
    small = [r for r in lost if r["rows"] == min(x["rows"] for x in f["rmsnorm"]["verdict"]["rows"])]
    if small:
        v.update(rms_small_loss=_x(small[0]["vs_fastest"]),
                 rms_small_peer=R.plain_name(small[0]["fastest_peer"]))
    rows, cols, _dt = MEMORY_SHAPE
    v["mem_shape"] = f"{rows:,} × {cols:,}"
    for op, key in (("rmsnorm", "rms"), ("add_rmsnorm", "add")):
        for impl, name in zip(PEAK_IMPLS, ("ours", "liger", "liger_ip", "f", "compile", "eager")):
            if impl in f["peaks"][op]:
                v[f"mem_{key}_{name}"] = f"{f['peaks'][op][impl]:,.0f} MiB"
    p = f["peaks"]["rmsnorm"]
    if "torch.eager" in p and "triton.two_stage" in p:
        v["mem_eager_ratio"] = f"{p['torch.eager'] / p['triton.two_stage']:.1f} times"
    b = f["backward"]
    if b:
        v.update(bw_pct_hi=f"{max(b['large_pct']):.0f}%", bw_pct_lo=f"{min(b['large_pct']):.0f}%",
                 bw_large=str(len(b["large"])),
                 bw_80=str(len(b["large"]) - len(b["large_below_80"])),
                 bw_below_80=page.listed([f"{r['op']} at {_shape(r)} ({_below(r['pct_floor'])})"
                                          for r in b["large_below_80"]]))
        for op, key in ((R.OP_NAMES["rmsnorm"], "rms"), (R.OP_NAMES["add_rmsnorm"], "add")):
            ratios = b["one_row"][op]
            if ratios:
                lo, hi = min(ratios, key=lambda t: t[0]), max(ratios, key=lambda t: t[0])
                v.update({f"tiles_{key}_lo": _x(lo[0]), f"tiles_{key}_hi": _x(hi[0]),
                          f"tiles_{key}_lo_at": _shape(lo[1]),
                          f"tiles_{key}_hi_at": _shape(hi[1])})
        for k, cols in enumerate(sorted({r["cols"] for r in b["reduce"]})):
            for r in (r for r in b["reduce"] if r["cols"] == cols):
                name = "new" if r["tile"] == R.REDUCE_TILE_NOW else "old"
                v[f"red{k}_{name}"] = f"{r['us']:.1f} µs"
                v[f"red{k}_partials"] = f"{r['programs']} × {r['cols']:,}"
        if b["unfetched"]:
            v.update(bw_unfetched_lo=_x(min(b["unfetched"])), bw_unfetched_hi=_x(max(b["unfetched"])))
        if b["recompute"]:
            v.update(bw_recompute_lo=_x(min(b["recompute"])), bw_recompute_hi=_x(max(b["recompute"])))
        if b["atomic"]:
            v.update(bw_atomic_lo=_x(min(b["atomic"])), bw_atomic_hi=_x(max(b["atomic"])))
    alone = f["peers_alone"]["rows"]
    if alone:
        ratios = [r["vs_fastest"] for r in alone]
        v.update(bwp_shapes=str(len(alone)), bwp_faster=str(len(f["peers_alone"]["faster"])),
                 bwp_lo=_x(min(ratios)), bwp_hi=_x(max(ratios)))
    for w in f["wide"]:  # wide_add_fp32_first: the fused add's backward at 8192 x 16384 fp32
        key = f"wide_{'rms' if w['op'] == 'rmsnorm' else 'add'}_{w['dtype']}"
        v.update({f"wide_{w['dtype']}_at": _shape(w), f"{key}_first": f"{w['first']:.1f} µs",
                  f"{key}_last": f"{w['last']:.1f} µs", f"{key}_gain": _x(w["last"] / w["first"]),
                  f"{key}_pct": f"{w['pct_floor']:.0f}%"})
        if w["peer"]:
            v.update({f"{key}_peer": R.plain_name(w["peer"]),
                      f"{key}_peer_us": f"{w['peer_us']:.1f} µs", f"{key}_vs_peer": _x(w["vs_peer"])})
    for k, g in enumerate(f["grid"]):
        v[f"grid{k}_shape"] = _shape(g["best"])
        v[f"grid{k}_best"] = g["best"]["design"]
        v[f"grid{k}_best_us"] = f"{g['best']['us']:.1f} µs"
        v[f"grid{k}_slowest"] = g["slowest"]["design"]
        v[f"grid{k}_slowest_us"] = f"{g['slowest']['us']:.1f} µs"
        if g["rule"]:
            v[f"grid{k}_rule"] = g["rule"]["design"]
            v[f"grid{k}_rule_us"] = f"{g['rule']['us']:.1f} µs"
    d = f["determinism"]
    if "atomic" in d and "two_stage" in d:
        v.update(det_runs=str(d["atomic"]["runs"]), det_patterns=str(d["atomic"]["distinct"]),
                 det_ulp=str(d["atomic"]["max_ulp_apart"]),
                 det_shape=_shape(d["atomic"]))
    return v


def your_gpu_rows(own: dict, book: dict) -> list[dict] | None:
    """The chapter's measured answers on the reader's GPU beside the book's (None when the reader
    has not recorded chapter 9)."""
    if not own.get("backward"):
        return None
    from .story import beside

    theirs = story_facts(book)

    def counts(op):
        return lambda f: "{faster} / {tie} / {slower}".format(**f[op]["verdict"])
    rows = [
        ("RMSNorm step: faster / tie / slower than the fastest peer", counts("rmsnorm")),
        ("fused add step: faster / tie / slower", counts("add_rmsnorm")),
        ("median time over the fastest peer, RMSNorm",
         lambda f: _x(f["rmsnorm"]["verdict"]["median_ratio"])),
        ("median time over the fastest peer, fused add",
         lambda f: _x(f["add_rmsnorm"]["verdict"]["median_ratio"])),
        ("backward alone, best % of its floor", lambda f: f"{max(f['backward']['large_pct']):.0f}%"),
    ]
    label = (theirs.get("gpu") or "H200") + " (the book)"
    return beside(rows, story_facts(own), theirs, label)

