"""Chapter 7's story values for its measured answer (section 6 and the result): the capstone, its
peers, Nsight Compute's DRAM share and the performance study's levers as the committed recording
has them (the pattern: :mod:`fusedrms.book.story`)."""
from __future__ import annotations

import statistics

from .. import records
from . import ch07_results as CR
from .ch06 import TWO_PASS_BEFORE_WARPS
from . import page
from .story import MISSING, recorded, value  # noqa: F401 (value: the notebook)

BIG_MB = 64  # "where a call moves 64 MB or more"
OURS_OUT_OF_PLACE, OURS_IN_PLACE = CR.CAPSTONE_RESIDUAL, CR.CAPSTONE_IN_PLACE
MID_SHAPE = (1024, 4096, "bf16")  # a few rows per SM: the fused op's mid-batch launch
# what a lever must pass besides the gap between runs, for a recording whose study timed the
# launch in use once (later ones derive it: lever_threshold)
UNREPEATED_THRESHOLD_PCT = 3.0
SMALL_ROWS, LARGE_ROWS = 1024, 4096  # in place: "at 1024 rows or fewer", "from 4096 rows"
H200_SMS, WARPS_PER_SM = 132, 64  # the H200's SMs and resident warps per SM (Hopper)
TWO_PASS_PER_SM_BEFORE = WARPS_PER_SM // TWO_PASS_BEFORE_WARPS  # the two-pass launch before


def load(machine: str | None = records.COMMITTED) -> dict:
    """The peers' recording of ``machine`` (the committed one by default; None: the recording
    this reader's page would show)."""
    doc, _ = CR.peers_doc(machine=machine)
    return {"peers": doc, "ncu": recorded("ncu_summary", machine),
            "levers": recorded("capstone_levers", machine),
            "wide_ncu": recorded("capstone_wide_ncu", machine),
            "in_place_ncu": recorded("capstone_in_place_ncu", machine)}


def story_facts(docs: dict) -> dict:
    """The numbers behind section 6's prose, unformatted (empty where nothing is recorded)."""
    from ..measure import compare

    doc = docs["peers"]
    points = CR.peer_points(doc)
    fused, residual = (CR.peer_table(doc, op, points)
                       for op in ("add_rmsnorm", "add_rmsnorm_residual"))
    if not (fused and residual):
        return {}
    band = compare.tie_band([r for r in doc.get("records", []) if r.get("mode") == "rotating"])
    complete = [r for r in fused if not r["missing"]]
    lost = [r for r in complete if band is not None and r["ratio"] > 1 + band]
    # rows the kernel holds whole (one pass) and rows it walks twice in chunks
    whole, two = _by_passes(complete)
    single = [r for r in whole if r["rows"] == 1]
    rs_whole, rs_two = _by_passes([r for r in residual if not r["missing"]])
    big_rs = [r for r in rs_whole if r["MB"] >= BIG_MB]
    calls = CR.python_calls(doc, "add_rmsnorm_residual", spread=True)
    processes = sorted({int(r["processes"]) for r in doc.get("records", [])
                        if r.get("status", "ok") == "ok" and r.get("sweep", "peers") in CR.PEER_SWEEPS
                        and r.get("processes")})
    return {
        "band": band, "fused": fused, "residual": residual, "processes": processes,
        "fu_peers": CR.peers_of(fused, CR.peer_attempts(doc, "add_rmsnorm")),
        "rs_peers": CR.peers_of(residual, CR.peer_attempts(doc, "add_rmsnorm_residual")),
        "floor_GBps": (records.copy_floor_beside(doc).GBps
                       if records.copy_floor_beside(doc) else None),
        "fu_counts": CR.tie_counts(fused, band), "rs_counts": CR.tie_counts(residual, band),
        "fastest_peers": {r["peer"] for r in complete},
        "wide_ncu": _ncu_pair(docs.get("wide_ncu")),
        "in_place_ncu": _ncu_pair(docs.get("in_place_ncu")),
        "single": single, "single_lost": [r for r in single if r in lost],
        "mid": next((r for r in complete if (r["rows"], r["cols"], r["dtype"]) == MID_SHAPE), None),
        "big_rs": big_rs, "big_rs_peers": [r["peer"] for r in big_rs],
        "whole_lost": [r for r in lost if r in whole],
        "rs_whole_lost": [r for r in rs_whole if band is not None and r["ratio"] > 1 + band],
        "in_place_lost": _in_place_lost(doc, points, band),
        # two passes: fewer rows than the GPU has SMs leave SMs idle (one program per row)
        "two": two, "two_few": [r for r in two if r["rows"] < H200_SMS],
        "two_many": [r for r in two if r["rows"] >= H200_SMS],
        "rs_two_few": [r for r in rs_two if r["rows"] < H200_SMS],
        "rs_two_many": [r for r in rs_two if r["rows"] >= H200_SMS],
        "fi_max_cols": _unsupported_limit(doc, "flashinfer.fused_add_rmsnorm"),
        "ip_small": CR.in_place_ratios(points, max_rows=SMALL_ROWS),
        "ip_large": CR.in_place_ratios(points, min_rows=LARGE_ROWS),
        "py_out": calls.get(OURS_OUT_OF_PLACE),
        "py_in": calls.get(OURS_IN_PLACE),
        "eager": CR.eager_ratios(points, BIG_MB), "large": CR.peer_summary(fused, BIG_MB),
        "py_fused": CR.python_calls(doc).get("capstone.fused"),
        "py_torch": CR.python_calls(doc).get("torch.rms_norm_add"),
        "above": sorted((r for r in fused if round(r.get("pct_floor") or 0) > 100),
                        key=lambda r: -r["pct_floor"]),
        "dram": _dram(docs.get("ncu")), "levers": _levers(docs.get("levers"), points, doc),
        "before": _launch_before(docs.get("levers")),
        "rules": rules_before_after(docs.get("levers")),
    }


def _in_place_lost(doc, points, band: float | None) -> list[dict]:
    """The residual op's :func:`ch07_results.peer_table` rows for its in-place call that are
    slower than the fastest peer beyond the tie band, each with ``own``: its in-place time over
    its out-of-place time (:func:`ch07_results.in_place_over_out_of_place`)."""
    if band is None:
        return []
    own = CR.in_place_over_out_of_place(points)
    rows = CR.peer_table(doc, "add_rmsnorm_residual", points, mine=OURS_IN_PLACE)
    return [{**r, "own": own[(r["rows"], r["cols"], r["dtype"])]}
            for r in rows if not r["missing"] and r["ratio"] > 1 + band
            and (r["rows"], r["cols"], r["dtype"]) in own]


def _by_passes(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(rows of shapes the capstone holds whole, rows of shapes it takes in two passes)."""
    from ..kernels import add_rmsnorm as A

    two = [r for r in rows if A.takes_two_passes(r["cols"])]
    return [r for r in rows if r not in two], two


def _two_pass_launches(row: dict) -> dict:
    """The launches the prose compares at a two-pass width: rows of x and r between the passes
    in the launch before and in TWO_PASS_CONFIG's 32-warp programs, one to an SM (on the H200,
    Triton 3.6, 54 registers a thread for the residual op: a second program does not fit in
    64K); the fused op's exchange design (EXCHANGE_CONFIG: a row over programs of 4096 columns,
    all resident, that exchange their partial sums); the row split over programs in small
    batches."""
    from .. import dtypes
    from ..kernels import add_rmsnorm as A
    from ..kernels import add_rmsnorm_split as S

    row_bytes = 2 * row["cols"] * dtypes.nbytes(row["dtype"])  # x and r
    before = H200_SMS * TWO_PASS_PER_SM_BEFORE
    return {"two_rows_before": f"{before:,}",
            "two_held_before": f"{before * row_bytes / 1e6:.0f} MB",
            "two_held": f"{H200_SMS * row_bytes / 1e6:.0f} MB",
            "two_chunk": f"{A.TWO_PASS_CONFIG.chunk:,}",
            "two_warps": str(A.TWO_PASS_CONFIG.num_warps),
            "ex_pieces": str(S.segments(row["cols"], A.EXCHANGE_CONFIG.segment)),
            "ex_cols": f"{A.EXCHANGE_CONFIG.segment:,}",
            "split_max_rows": str(H200_SMS // 2),
            "split_pieces": str(S.segments(row["cols"], A.SPLIT_CONFIG.segment)),
            "split_cols": f"{A.SPLIT_CONFIG.segment:,}"}


def _unsupported_limit(doc: dict | None, impl: str) -> int | None:
    """The widest row ``impl`` runs, as the harness said when it listed a wider one unsupported."""
    import re

    for r in (doc or {}).get("records", []):
        found = re.search(r"over its limit of (\d+)", str(r.get("status", "")))
        if r.get("impl") == impl and found:
            return int(found.group(1))
    return None


def _ratio_range(ratios) -> str:
    ratios = list(ratios)
    return f"{CR.ratio_text(min(ratios))} to {CR.ratio_text(max(ratios))}"


def _dram(ncu_doc: dict | None) -> list[dict]:
    """Nsight Compute's DRAM throughput of the capstone at each profiled shape."""
    return [{"pct": float(r["dram_throughput_pct"]), "rows": r.get("rows"), "cols": r.get("cols")}
            for r in (ncu_doc or {}).get("records", []) if isinstance(r, dict)
            and r.get("impl") == CR.CAPSTONE and r.get("status", "ok") == "ok"
            and r.get("dram_throughput_pct") is not None]


def _metric(rec: dict, name: str) -> float | None:
    for kernel in rec.get("kernels", []):
        for key, m in kernel.get("metrics", {}).items():
            if key.split(" / ")[-1] == name:
                return float(str(m["value"]).replace(",", ""))
    return None


def _ncu_pair(doc: dict | None) -> dict:
    """{impl: DRAM bytes read and written, threads per program, programs, µs} of an Nsight
    Compute pair (ours and Inductor's kernel at the widest rows; the residual op out of place and
    in place); ``min_read``: x and r."""
    out = {}
    for r in (doc or {}).get("records", []):
        if not isinstance(r, dict) or r.get("status") != "ok":
            continue
        read, written = _metric(r, "dram__bytes_read.sum"), _metric(r, "dram__bytes_write.sum")
        if read is None:
            continue
        limits = [_metric(r, f"Block Limit {what}") for what in ("Registers", "Warps")]
        out[r["impl"]] = dict(read=read, written=written, us=r.get("duration_us"),
                              threads=_metric(r, "Block Size"), programs=_metric(r, "Grid Size"),
                              per_sm=min(limits) if None not in limits else None,
                              rows=r["rows"], cols=r["cols"], dtype=r["dtype"],
                              min_read=2 * r["rows"] * r["cols"] * (4 if r["dtype"] == "fp32" else 2))
    return out


def _dram_gb(profile: dict) -> str:
    """DRAM bytes read and written by one profiled call, in GB."""
    return f"{(profile['read'] + (profile['written'] or 0)) / 1e9:.3f} GB"


def lever_threshold(levers_doc: dict | None) -> float:
    """What a lever's change must pass besides the gap between runs (:func:`ch07_results.
    beyond_band`): the largest change of the launch in use timed twice in the study's run
    (:func:`ch07_results.in_run_repeat`), or :data:`UNREPEATED_THRESHOLD_PCT` where the study
    timed it once."""
    repeat = CR.in_run_repeat(levers_doc)
    return max((abs(v) for v in repeat.values()), default=UNREPEATED_THRESHOLD_PCT)


def _levers(levers_doc: dict | None, points, peers_doc: dict | None = None) -> dict | None:
    """The performance study's levers: each one's largest counted change either way. A change at
    a shape counts beyond :func:`lever_threshold` plus, where the peers were timed at the study's
    commit (:func:`ch07_results.one_recording`), the gap between the two runs of the launch in
    use there."""
    from . import ch07

    if not levers_doc:
        return None
    levers = CR.lever_summary(ch07.lever_effects(levers_doc))
    gaps = CR.launch_repeat(levers_doc, points) if CR.one_recording(levers_doc, peers_doc) else {}
    threshold = lever_threshold(levers_doc)

    def counted(sign):
        out = []
        for lv in levers:
            hits = [(sign * c, shape) for shape, c in lv["changes"].items()
                    if sign * c > 0 and CR.beyond_band(c, shape, gaps, threshold)]
            if hits:
                pct, shape = max(hits)
                out.append({"lever": lv["lever"], "pct": pct, "shape": shape})
        return sorted(out, key=lambda h: -h["pct"])

    gap_at = max(gaps, key=lambda k: abs(gaps[k]), default=None)
    return {"count": len(levers), "shorter": counted(-1), "longer": counted(1),
            "threshold": threshold,
            "gap": abs(gaps[gap_at]) if gap_at else None, "gap_at": gap_at}


# where the fused op's large batches stopped launching one 32-warp program a row (bf16): the
# residual-writing op's launch, one 16-byte vector a thread at 8192 columns, two at 16384
CHANGED_LAUNCH_SHAPES = ((16384, 8192), (16384, 16384))


def _launch_before(levers_doc: dict | None) -> list[dict]:
    """At :data:`CHANGED_LAUNCH_SHAPES`, the fused op's launch before (32 warps a row, which the
    residual-writing op still takes) against torch.compile, both timed by the
    lever study."""
    import torch

    from ..kernels import add_rmsnorm as A
    from . import ch07, study_timing

    if not levers_doc:
        return []
    index = {(r["op"], r["impl"], r["rows"], r["cols"], r["dtype"]): r["median_us"]
             for r in ch07.normalized(levers_doc)}
    out = []
    for rows, cols in CHANGED_LAUNCH_SHAPES:
        one_vector, _ = A.large_batch_config(cols, torch.bfloat16, write_sum=True)
        name = next((n for n, cfg in study_timing.candidates(cols, torch.bfloat16).items()
                     if cfg == one_vector), None)
        before = index.get(("add_rmsnorm", f"capstone[{name}]", rows, cols, "bf16"))
        peer = index.get(("add_rmsnorm", "torch.compile_add", rows, cols, "bf16"))
        if before and peer:
            out.append({"rows": rows, "cols": cols, "ratio": before / peer})
    return out


# where a rule on the batch replaced the table's launch (study_timing.LEVER_SHAPES' last four):
# one row; a row split over programs at 16 rows; the exchange at 1024 rows; the whole row at 32,768
RULE_SHAPES = {"one": (1, 4096), "split": (16, 65536), "exchange": (1024, 65536),
               "whole": (4096, 32768)}


def rules_before_after(levers_doc: dict | None) -> dict:
    """{rule: {op: {before, after, inductor_launch, compile}}} in µs at :data:`RULE_SHAPES`, from
    the lever study: the table's launch (study_timing.BEFORE_RULE), the launch in use, Inductor's
    two-pass launch in our kernel and torch.compile, each where the study timed it."""
    from . import ch07

    if not levers_doc:
        return {}
    index = {(r["op"], r["impl"], r["rows"], r["cols"]): r["median_us"]
             for r in ch07.normalized(levers_doc) if r["dtype"] == "bf16"}
    compiled = {"add_rmsnorm": "torch.compile_add", "add_rmsnorm_residual": "torch.compile_residual"}
    out: dict = {}
    for rule, (rows, cols) in RULE_SHAPES.items():
        for op, mine in ch07.OURS.items():
            got = {k: index.get((op, impl, rows, cols)) for k, impl in (
                ("before", "capstone[table]"), ("after", mine),
                ("inductor_launch", "capstone[two_pass_c2048_w16]"), ("compile", compiled[op]))}
            if got["before"] and got["after"]:
                out.setdefault(rule, {})[op] = got
    return out


def story_values(docs: dict) -> dict[str, str]:
    """Every value section 6's prose shows, formatted (absent where not recorded)."""
    f = story_facts(docs)
    if not f:
        return {}
    v: dict[str, str] = {}
    if f["band"] is not None:
        v["tie_band"] = f"±{100 * f['band']:.1f}%"
    if len(f["processes"]) == 1:
        v["processes"] = str(f["processes"][0])
    if f["floor_GBps"]:
        v["floor_rate"] = f"{f['floor_GBps']:,.0f} GB/s"
    v["fu_peer_names"] = page.listed(CR.display_names(f["fu_peers"], prose=True))
    v["rs_peer_names"] = page.listed(CR.display_names(f["rs_peers"], prose=True))
    tallies = ("faster", "tie", "slower")
    for prefix, counts, told in (("fu", f["fu_counts"], tallies + ("shapes",)),
                                 ("rs", f["rs_counts"], tallies)):
        if counts:
            v.update({f"{prefix}_{k}": str(counts[k]) for k in told})
    ours, inductor = (f["wide_ncu"].get(k) for k in (CR.CAPSTONE, "torch.compile_add"))
    if ours and inductor:
        # the two-pass launch this shape had before, each program holding its row of x and r
        # in L2 between the passes
        per_sm = TWO_PASS_PER_SM_BEFORE
        held = H200_SMS * per_sm * ours["min_read"] / ours["rows"]
        l2 = ((docs["peers"] or {}).get("provenance") or {}).get("l2_bytes")
        if l2:
            v.update(wncu_per_sm=str(per_sm), wncu_held=f"{held / 1e6:.0f} MB",
                     wncu_l2=f"{l2 / 1e6:.0f} MB",
                     wncu_row_kb=f"{ours['min_read'] / ours['rows'] / 1024:.0f} KB")
        at = next((r for r in f["fused"] if (r["rows"], r["cols"], r["dtype"])
                   == (ours["rows"], ours["cols"], ours["dtype"])), None)
        if at and at["peers"].get("torch.compile_add"):  # the profiled shape's time, Inductor's
            v["wncu_ratio"] = CR.ratio_text(at["capstone_us"] / at["peers"]["torch.compile_add"])
        v.update(wncu_at=CR.shape_text(ours["rows"], ours["cols"], ours["dtype"]),
                 wncu_min=f"{ours['min_read'] / 1e9:.3f} GB",
                 wncu_ours=f"{ours['read'] / 1e9:.3f} GB",
                 wncu_inductor=f"{inductor['read'] / 1e9:.3f} GB")
    out_of_place, in_place = (f["in_place_ncu"].get(k) for k in (OURS_OUT_OF_PLACE, OURS_IN_PLACE))
    if out_of_place and in_place and out_of_place["us"] and in_place["us"]:
        # the same kernel both ways, one isolated call each under Nsight Compute
        v.update(ipncu_at=CR.shape_text(in_place["rows"], in_place["cols"], in_place["dtype"]),
                 ipncu_out_gb=_dram_gb(out_of_place), ipncu_in_gb=_dram_gb(in_place),
                 ipncu_out_us=f"{out_of_place['us']:.1f} µs", ipncu_in_us=f"{in_place['us']:.1f} µs",
                 ipncu_ratio=CR.ratio_text(in_place["us"] / out_of_place["us"]))
    if f["single"]:
        v.update(single_lo=f"{min(r['capstone_us'] for r in f['single']):.1f}",
                 single_hi=f"{max(r['capstone_us'] for r in f['single']):.1f} µs")
    if f["single_lost"]:
        v["single_gap"] = (f"{max(r['capstone_us'] - r['peer_us'] for r in f['single_lost']):.2f}"
                           " µs")
    if f["big_rs"]:
        ratios = [r["ratio"] for r in f["big_rs"]]
        worst_rs = max(f["big_rs"], key=lambda r: r["ratio"])
        v.update(rs_big_median=CR.ratio_text(statistics.median(ratios)),
                 rs_big_max=CR.ratio_text(max(ratios)),
                 rs_big_max_at=CR.shape_text(worst_rs["rows"], worst_rs["cols"],
                                             worst_rs["dtype"]),
                 rs_big_max_peer=CR.display_name(worst_rs["peer"]))
    modes = _process_modes(docs["peers"], OURS_IN_PLACE)
    if modes:
        v.update(mode_at=CR.shape_text(*modes["shape"]), mode_gap=f"{modes['gap']:.1f}%")
    if f["mid"]:
        v.update(mid_at=CR.shape_text(*MID_SHAPE), mid_us=f"{f['mid']['capstone_us']:.2f} µs",
                 mid_ratio=CR.ratio_text(f["mid"]["ratio"]),
                 mid_peer=CR.display_name(f["mid"]["peer"]))
    if f["ip_small"]:
        v["ip_small_max"] = f"{100 * (f['ip_small'][-1] - 1):.0f}%"
    if f["ip_large"]:
        v["ip_large"] = _ratio_range(f["ip_large"])
    if f["py_out"] is not None and f["py_in"] is not None:
        v.update(py_out=f"{f['py_out'][0]:.1f}-{f['py_out'][1]:.1f} µs",
                 py_in=f"{f['py_in'][0]:.1f}-{f['py_in'][1]:.1f} µs")
    for key in ("two_few", "two_many", "rs_two_few", "rs_two_many"):
        if f[key]:
            v[key] = _ratio_range(r["ratio"] for r in f[key])
    both_two = f["two"] + f["rs_two_few"] + f["rs_two_many"]
    if both_two:
        v["two_hi"] = CR.ratio_text(max(r["ratio"] for r in both_two))
    if f["two"]:
        v.update(_two_pass_launches(f["two"][0]))
    big = [r for r in f["fused"] if r["MB"] >= BIG_MB and r["pct_floor"] and r["peer_pct_floor"]]
    if big:  # the lowest share of the floor among large calls, and the fastest peer's there
        low = min(big, key=lambda r: r["pct_floor"])
        v.update(large_min_at=CR.shape_text(low["rows"], low["cols"], low["dtype"]),
                 large_min_peer_pct=f"{low['peer_pct_floor']:.0f}%")
        if low.get("copy_pct_floor"):  # a copy of the same bytes, timed at that size
            v["large_min_copy_pct"] = f"{low['copy_pct_floor']:.0f}%"
    ip_lost = f["in_place_lost"]
    if ip_lost:  # in place, slower than the fastest peer: where, by how much, and against itself
        worst = max(ip_lost, key=lambda r: r["ratio"])
        v.update(ip_lost_at=page.listed([CR.shape_text(r["rows"], r["cols"], r["dtype"])
                                         for r in ip_lost]),
                 ip_lost_n=str(len(ip_lost)), ip_lost_max=CR.ratio_text(worst["ratio"]),
                 ip_lost_peer=CR.display_name(worst["peer"]),
                 ip_lost_own=_ratio_range(r["own"] for r in ip_lost))
    if f["fi_max_cols"]:
        v["fi_max_cols"] = f"{f['fi_max_cols']:,}"
    if f["eager"]:
        v.update(eager_median=CR.ratio_text(statistics.median(f["eager"])),
                 eager_shapes=str(len(f["eager"])))
    large = f["large"]
    if large.get("large_pct_median") is not None:
        v.update(large_median=f"{large['large_pct_median']:.0f}%",
                 large_min=f"{large['large_pct_min']:.0f}%")
    if large.get("large_peer_pct_median") is not None:
        v["large_peer_median"] = f"{large['large_peer_pct_median']:.0f}%"
    if f["above"]:
        top = f["above"][0]
        v.update(above_at=CR.shape_text(top["rows"], top["cols"]), above_pct=f"{top['pct_floor']:.0f}%",
                 above_n=str(len(f["above"])))
    if f["dram"]:
        d = max(f["dram"], key=lambda r: (r["rows"] or 0) * (r["cols"] or 0))
        v.update(dram_pct=f"{d['pct']:.0f}%", dram_at=CR.shape_text(d["rows"], d["cols"]))
    if f["py_fused"] and f["py_torch"]:
        v.update(py_fused=f"{f['py_fused']:.1f} µs", py_torch=f"{f['py_torch']:.1f} µs")
    if f["before"]:
        v["before_lost"] = page.listed([f"{CR.ratio_text(r['ratio'])} at "
                                        f"{CR.shape_text(r['rows'], r['cols'])}"
                                        for r in f["before"]])
    lv = f["levers"]
    if lv and lv["longer"]:
        worst = lv["longer"][0]
        v.update(lv_threshold=f"{lv['threshold']:.1f}%", lv_n=str(lv["count"]),
                 lv_longer=str(len(lv["longer"])),
                 lv_worst=worst["lever"], lv_worst_pct=f"{worst['pct']:.1f}%",
                 lv_worst_at=CR.shape_text(*worst["shape"]))
        from . import ch07

        hint = [h for h in lv["longer"] if h["lever"] == ch07.HINT_LEVER]
        if hint:
            v.update(lv_hint_pct=f"{hint[0]['pct']:.0f}%",
                     lv_hint_at=CR.shape_text(*hint[0]["shape"]))
    v.update(_rule_values(f["rules"]))
    return v


def _rule_values(rules: dict) -> dict[str, str]:
    """Each batch rule's before and after (:func:`rules_before_after`) as the prose says them:
    ``rule_<rule>_{at,before,after}`` for the fused op (``rs_rule_one_*``: the residual op's one
    row), the split's torch.compile time and Inductor's two-pass launch over the whole row."""
    v: dict[str, str] = {}
    for rule, ops in rules.items():
        for op, prefix in (("add_rmsnorm", "rule"), ("add_rmsnorm_residual", "rs_rule")):
            got = ops.get(op)
            if not got or (prefix == "rs_rule" and rule != "one"):
                continue
            digits = 2 if got["after"] < 10 else 1
            v.update({f"{prefix}_{rule}_at": CR.shape_text(*RULE_SHAPES[rule]),
                      f"{prefix}_{rule}_before": f"{got['before']:.{digits}f} µs",
                      f"{prefix}_{rule}_after": f"{got['after']:.{digits}f} µs"})
    split = rules.get("split", {}).get("add_rmsnorm")
    if split and split["compile"]:
        v["rule_split_compile"] = f"{split['compile']:.1f} µs"
    whole = rules.get("whole", {}).get("add_rmsnorm")
    if whole and whole["inductor_launch"]:
        v["rule_whole_two"] = CR.ratio_text(whole["inductor_launch"] / whole["after"])
    return v


def _process_modes(doc: dict | None, impl: str) -> dict | None:
    """The widest spread between one implementation's process medians at one shape (rotating
    timer, the residual op): the same kernel, timed in separate processes."""
    best = None
    for r in (doc or {}).get("records", []):
        meds = r.get("process_medians_us") or []
        if (r.get("impl") == impl and r.get("status") == "ok" and r.get("mode") == "rotating"
                and len(meds) > 1):
            gap = 100 * (max(meds) / min(meds) - 1)
            if best is None or gap > best["gap"]:
                best = {"shape": (r["rows"], r["cols"], r["dtype"]), "lo": min(meds),
                        "hi": max(meds), "gap": gap}
    return best


def your_gpu_rows(own: dict, book: dict) -> list[dict] | None:
    """Section 6's measured answers on the reader's GPU beside the book's (None when the reader
    has not recorded chapter 7)."""
    from .story import beside

    mine = story_facts(own) if own.get("peers") else {}
    if not mine:
        return None

    def counts(key):
        return lambda f: "{faster} / {tie} / {slower}".format(**f[key])
    rows = [
        ("fused kernel: faster / tie / slower than the fastest peer", counts("fu_counts")),
        ("residual-writing variant: faster / tie / slower", counts("rs_counts")),
        ("tie band (run-to-run spread)", lambda f: f"±{100 * f['band']:.1f}%"),
        ("fused kernel on rows held whole: slower at",
         lambda f: page.counted(len(f["whole_lost"]), "shape")),
        ("from 64 MB a call: median % of the copy floor",
         lambda f: f"{f['large']['large_pct_median']:.0f}%"),
        ("a call from Python: capstone, F.rms_norm(x + r)",
         lambda f: f"{f['py_fused']:.1f} µs, {f['py_torch']:.1f} µs"),
    ]
    label = (((book.get("peers") or {}).get("provenance") or {}).get("gpu") or "H200")
    return beside(rows, mine, story_facts(book), label.removeprefix("NVIDIA ") + " (the book)")
