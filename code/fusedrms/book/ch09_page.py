"""Chapter 9's page: the readers that turn the recorded ``ch09_backward.json`` (written by
:func:`fusedrms.book.ch09.record`) into the chapter's tables, plot and sentences: :func:`load`,
:func:`training_table`, :func:`backward_table`, :func:`memory_table`, :func:`verdict` and
:func:`figure`. Without a recording each returns None; none invents a number. No measurement
happens here. The chapter's prose about the recording is its Markdown, with the values of
:mod:`fusedrms.book.ch09_story`.
"""
from __future__ import annotations

import statistics

from .. import records
from . import page
from .ch09 import BACKWARD_PEERS, OPS, OURS, RECORD_NAME, TRAIN_IMPLS

LARGE_BYTES = 64 << 20  # the chapter's comparison counts shapes moving at least this much
REDUCE_TILE_NOW = "128x16"  # the library's stage-2 tile among the recorded ones


def load(machine: str | None = None) -> dict | None:
    """The recorded file (the reader's own recording for their GPU when there is one, else the
    committed one: :func:`fusedrms.records.load`) with every floor at the book's copy floor
    (:func:`fusedrms.records.at_copy_floor`), not at the copies its processes measured; None when
    there is none (the page says so)."""
    try:
        doc = records.load(RECORD_NAME, machine)
    except FileNotFoundError:
        return None
    return records.at_copy_floor(doc, time="us", share="pct_floor")


# what a reader calls each implementation and design (the registry's names stay in the records)
PLAIN_NAMES = {"triton.two_stage": "ours", "triton.atomic": "ours with atomic dw",
               "torch.eager": "eager PyTorch", "torch.rms_norm": "F.rms_norm",
               "torch.compile": "torch.compile", "liger": "Liger",
               "liger.in_place": "Liger in place"}
DESIGN_NAMES = {"two_stage": "two-stage dw", "atomic": "atomic dw",
                "recompute_r": "two-stage dw, r recomputed",
                "no_prefetch": "two-stage dw, no prefetch",
                "one_row": "two-stage dw, one row per step",
                "dw_last": "two-stage dw, dw updated last"}
OP_NAMES = {"rmsnorm": "RMSNorm", "add_rmsnorm": "fused add + RMSNorm"}


def plain_name(impl: str) -> str:
    return PLAIN_NAMES.get(impl, impl)


def shape_text(rows: int, cols: int, dt: str) -> str:
    """A shape as the tables key it ("4096x16384 bf16")."""
    return f"{rows}x{cols} {dt}"


def _select(doc, **where) -> list[dict]:
    return [r for r in (doc or {}).get("records", [])
            if all(r.get(k) == v for k, v in where.items())]


def _with_spread(rec: dict) -> str | None:
    """A record's µs with the p10-p90 of its process times, as chapters 6 and 7 show them."""
    from ..measure import harness

    if "us" not in rec:
        return None
    lo, hi = harness.process_quantiles(rec.get("process_us") or [rec["us"]])
    return page.median_with_spread({"median_us": rec["us"], "process_p10_us": lo,
                                    "process_p90_us": hi})


def training_table(doc, op: str) -> list[dict] | None:
    """One row per shape: µs of each implementation (forward + backward), ours as % of floor, and
    ours against the fastest peer that passed its gradient check."""
    if doc is None:
        return None
    rows = []
    shapes = sorted({(r["rows"], r["cols"], r["dtype"]) for r in _select(doc, kind="train", op=op)},
                    key=lambda s: (s[2] != "bf16", s[0], s[1]))
    for rows_, cols, dt in shapes:
        recs = {r["impl"]: r for r in _select(doc, kind="train", op=op, rows=rows_, cols=cols,
                                              dtype=dt)}
        ours = recs.get("triton.two_stage", {})
        peers = [r for i, r in recs.items() if i not in OURS and "us" in r and r.get("check_ok")]
        fastest = min(peers, key=lambda r: r["us"], default=None)
        row = {"shape": f"{rows_}x{cols} {dt}", "rows": rows_, "cols": cols, "dtype": dt,
               "MB": ours.get("bytes", 0) / 1e6, "pct_floor": ours.get("pct_floor")}
        for impl in TRAIN_IMPLS:
            row[impl] = recs.get(impl, {}).get("us")
            row[f"{impl} checked"] = recs.get(impl, {}).get("check_ok")
        row["ours_spread"] = _with_spread(ours)
        row["fastest_peer"] = fastest["impl"] if fastest else None
        row["vs_fastest"] = (ours["us"] / fastest["us"]) if fastest and "us" in ours else None
        rows.append(row)
    return rows


def backward_table(doc, kind: str = "backward") -> list[dict] | None:
    """The backward alone: µs and % of its floor per design and shape (``kind="programs"``: the
    two-stage design per number of programs per SM)."""
    if doc is None:
        return None
    out = []
    for r in _select(doc, kind=kind):
        if r["impl"] in BACKWARD_PEERS:  # the peers' backward alone: backward_peers_table
            continue
        if "us" in r:  # the atomic design stores no partials: 0% of its bytes, not a blank
            partials = 0 if r["impl"] == "atomic" else 2 * r["programs"] * r["cols"] * 4
            design = (r["impl"].split("/")[0] if kind == "programs"
                      else DESIGN_NAMES.get(r["impl"], r["impl"]))
            out.append({"op": OP_NAMES.get(r["op"], r["op"]), "design": design,
                        "shape": shape_text(r["rows"], r["cols"], r["dtype"]),
                        "rows": r["rows"], "cols": r["cols"], "dtype": r["dtype"],
                        "programs": r["programs"], "MB": r["bytes"] / 1e6,
                        "us": r["us"], "pct_floor": r["pct_floor"],
                        "partials_pct": 100.0 * partials / r["bytes"]})
    return out


def backward_peers_table(doc, op: str) -> list[dict] | None:
    """The backward alone, ours (two-stage dw) against the peers' backward alone, per shape: µs
    of each, the fastest peer that passed its gradient check and ours over it. None where the
    recording has no peer's backward alone."""
    if doc is None or not any(r["impl"] in BACKWARD_PEERS
                              for r in _select(doc, kind="backward", op=op)):
        return None
    out = []
    shapes = sorted({(r["rows"], r["cols"], r["dtype"]) for r in _select(doc, kind="backward",
                                                                         op=op)},
                    key=lambda s: (s[2] != "bf16", s[0], s[1]))
    for rows_, cols, dt in shapes:
        recs = {r["impl"]: r for r in _select(doc, kind="backward", op=op, rows=rows_,
                                              cols=cols, dtype=dt)}
        ours = recs.get("two_stage", {})
        peers = [recs[i] for i in BACKWARD_PEERS
                 if i in recs and "us" in recs[i] and recs[i].get("check_ok")]
        fastest = min(peers, key=lambda r: r["us"], default=None)
        row = {"shape": shape_text(rows_, cols, dt), "rows": rows_, "cols": cols, "dtype": dt,
               "ours": ours.get("us"), "pct_floor": ours.get("pct_floor"),
               **{i: recs.get(i, {}).get("us") for i in BACKWARD_PEERS},
               "fastest_peer": fastest["impl"] if fastest else None,
               "vs_fastest": (ours["us"] / fastest["us"]) if fastest and "us" in ours else None}
        out.append(row)
    return out


def reduce_table(doc) -> list[dict] | None:
    """Stage 2 alone (the dw reduce) per tile and partials: µs and the partials' bytes."""
    if doc is None:
        return None
    return [{"partials": f"{r['programs']} x {r['cols']}", "programs": r["programs"],
             "cols": r["cols"], "tile": r["impl"], "MB": r["bytes"] / 1e6, "us": r["us"]}
            for r in _select(doc, kind="reduce") if "us" in r] or None


def tie_band(doc) -> float | None:
    """The recording's tie band (:func:`fusedrms.measure.compare.tie_band` over every timed case's
    process times); None when no case has two processes."""
    from ..measure import compare

    return compare.tie_band([{"status": "ok", "median_us": r["us"],
                              "process_medians_us": r.get("process_us") or [r["us"]]}
                             for r in _select(doc) if "us" in r and r.get("us")])


def verdict(doc, op: str, large_only: bool = False) -> dict | None:
    """Ours against the fastest checked peer over the compared shapes (``large_only``: only those
    moving at least :data:`LARGE_BYTES`): how many, how many at or below 1.00x, the median and
    the worst ratio, the median % of the floor, how many are faster, ties and slower outside
    the recording's :func:`tie_band` (``band``, 0 without one), and which peers lack a checked
    time at how many of these shapes (missing, never counted as beaten). None when no shape
    qualifies."""
    from ..measure import compare

    table = [r for r in training_table(doc, op) or []
             if not large_only or r["MB"] * 1e6 >= LARGE_BYTES]
    rows = [r for r in table if r["vs_fastest"] is not None]
    alone = [r["shape"] for r in table if r["vs_fastest"] is None
             and r["triton.two_stage"] is not None]
    if not rows:
        return None
    ratios = [r["vs_fastest"] for r in rows]
    worst = max(rows, key=lambda r: r["vs_fastest"])
    peers = [i for i in TRAIN_IMPLS if i not in OURS]
    missing = {i: sum(not (r[i] is not None and r[f"{i} checked"]) for r in rows) for i in peers}
    floors = [r["pct_floor"] for r in rows if r["pct_floor"] is not None]
    band = tie_band(doc)
    counts = {"faster": 0, "tie": 0, "slower": 0}
    for x in ratios:
        counts[compare.verdict(x, 1.0, band or 0.0)] += 1
    return {"op": op, "shapes": len(rows), "at_or_below_1": sum(x <= 1.0 for x in ratios),
            "band": band, **counts,
            "median_ratio": statistics.median(ratios), "worst_ratio": worst["vs_fastest"],
            "worst_shape": worst["shape"], "worst_peer": worst["fastest_peer"],
            "median_pct_floor": statistics.median(floors) if floors else None,
            "rows": rows, "missing": {i: n for i, n in missing.items() if n},
            "no_peer_shapes": alone}


def unrecorded_peers(doc) -> list[str]:
    """The training peers with no record at all and no reason recorded (a peer the measurement
    has and the recording predates), in :data:`TRAIN_IMPLS` order."""
    seen = {r.get("impl") for r in _select(doc, kind="train")}
    gone = {m["impl"] for m in missing_peers(doc)}
    return [i for i in TRAIN_IMPLS if i not in OURS and i not in seen and i not in gone]


def missing_sentence(doc) -> str | None:
    """The peers the recording could not run at all, with the reason, and those it predates; or
    None."""
    gone = [f"{plain_name(m['impl'])} ({m['reason']})" for m in missing_peers(doc)]
    gone += [f"{plain_name(i)} (not measured by this recording)" for i in unrecorded_peers(doc)]
    if not gone:
        return None
    return "Not in the recording: " + "; ".join(gone) + "."


def memory_table(doc, shape: tuple[int, int, str]) -> list[dict] | None:
    """The peak memory of one training step (MiB beyond what existed before it) per
    implementation at ``shape``, both ops side by side; None where the recording has none."""
    peaks = {(r["op"], r["impl"]): r["peak_MiB"] for r in _select(doc, kind="train")
             if r.get("peak_MiB") is not None and (r["rows"], r["cols"], r["dtype"]) == shape}
    rows = [{"implementation": plain_name(i),
             **{f"{OP_NAMES[op]}, MiB": peaks.get((op, i)) for op in OPS}}
            for i in TRAIN_IMPLS if any((op, i) in peaks for op in OPS)]
    return rows or None


def determinism_rows(doc) -> list[dict]:
    return [r for r in _select(doc, kind="determinism") if "distinct" in r]


def missing_peers(doc) -> list[dict]:
    return _select(doc, kind="peer_missing")


def figure(doc, op: str):
    """Bar chart: time of each implementation relative to ours (two-stage), per shape."""
    table = training_table(doc, op)
    if not table:
        return None
    from . import page

    impls = [i for i in TRAIN_IMPLS if i != "triton.two_stage" and any(r[i] for r in table)]
    fig, ax = page.figure(height=3.6)
    width = 0.8 / max(len(impls), 1)
    for k, impl in enumerate(impls):
        vals = [(r[impl] / r["triton.two_stage"]) if r[impl] and r["triton.two_stage"]
                else float("nan") for r in table]  # nan: not timed, no bar
        failed = any(r[f"{impl} checked"] is False for r in table)
        # bars grow from 1 (ours) up or down, on a log axis: 2x slower and 2x faster look alike
        ax.bar([i + k * width for i in range(len(table))], [v - 1 for v in vals], width,
               bottom=1, label=plain_name(impl) + (" (gradients off)" if failed else ""))
    ax.axhline(1.0, color="#374151", linewidth=0.8, label="ours (two-stage dw) = 1")
    ax.set_yscale("log")  # eager is several times slower; the peers near 1 stay readable
    shown = [b.get_y() + b.get_height() for b in ax.patches if b.get_height() == b.get_height()]
    low, high = min(shown + [1.0]), max(shown + [1.0])
    ticks = [t for t in (0.2, 0.5, 1, 2, 5, 10, 20, 50) if low / 2.5 <= t <= high * 2.5]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(low / 1.3, high * 4)  # room for the legend above the bars
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(table))])
    ax.set_xticklabels([r["shape"].replace(" ", "\n") for r in table], fontsize=9)
    ax.set_ylabel("time / ours (two-stage dw)")
    ax.set_title(f"{OP_NAMES.get(op, op)}: forward + backward, lower is faster", fontsize=10)
    ax.legend(fontsize=8, ncol=3, loc="upper left")
    return fig


# Times in µs per call (the table's caption says so: ten columns fit the text column unrepeated).
TRAIN_COLUMNS = {"shape": ("shape", ""), "MB": ("MB", ".0f"),
                 "ours_spread": ("ours (p10-p90)", ""),
                 "torch.eager": ("eager", ".1f"), "torch.rms_norm": ("F.rms_norm", ".1f"),
                 "torch.compile": ("compile", ".1f"), "liger": ("Liger", ".1f"),
                 "liger.in_place": ("Liger in place", ".1f"),
                 "vs_fastest": ("ours / fastest peer", ".2f"), "pct_floor": ("ours % floor", ".0f")}
BACKWARD_COLUMNS = {"op": ("op", ""), "design": ("design", ""), "shape": ("shape", ""),
                    "programs": ("programs", ""), "MB": ("MB", ".0f"), "us": ("µs", ".1f"),
                    "pct_floor": ("% floor", ".0f"),
                    "partials_pct": ("partials, % of bytes", ".0f")}
BACKWARD_PEER_COLUMNS = {"shape": ("shape", ""), "ours": ("ours", ".1f"), "liger": ("Liger", ".1f"),
                         "liger.in_place": ("Liger in place", ".1f"),
                         "torch.compile": ("compile", ".1f"),
                         "vs_fastest": ("ours / fastest peer", ".2f"),
                         "pct_floor": ("ours % floor", ".0f")}
REDUCE_COLUMNS = {"partials": ("partials (programs x columns)", ""),
                  "tile": ("tile (partials x columns)", ""), "MB": ("MB", ".1f"),
                  "us": ("µs", ".1f")}
PROGRAM_COLUMNS = {"shape": ("shape", ""), "design": ("programs per SM", ""),
                   "programs": ("programs", ""), "us": ("µs", ".1f"), "pct_floor": ("% floor", ".0f"),
                   "partials_pct": ("partials, % of bytes", ".1f")}


def for_page(rows: list[dict], columns: dict) -> tuple[list[dict], dict]:
    """(rows keyed by header, formats by header) for :func:`fusedrms.book.page.table`; columns
    no row has a value for are left out (a peer missing from the recording)."""
    keep = {k: v for k, v in columns.items() if any(r.get(k) is not None for r in rows)}
    out = [{header: r.get(k) for k, (header, _) in keep.items()} for r in rows]
    return out, {header: fmt for header, fmt in keep.values() if fmt}
