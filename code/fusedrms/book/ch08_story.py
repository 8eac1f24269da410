"""Chapter 8's story values: the GPU's comparison, the times, the levers and the price of exactness,
as the committed recording has them (the pattern: :mod:`fusedrms.book.story`)."""
from __future__ import annotations

from .. import records
from ..kernels.rmsnorm_fp8_spec import HIDDEN_SIZE
from . import ch08, ch08_page, ch08_tuning
from .story import MISSING, recorded, value  # noqa: F401 (the notebook reads story.value)

# tilefoundry's static analysis of the two programs at 2 x 7168 bf16 (references.bib: tilefoundry):
# (bytes read, bytes written, ideal ns at the H200's data-sheet bandwidth)
TILEFOUNDRY = {"rmsnorm_fp8_naive": (71680, 43456, 24), "rmsnorm_fp8_fused": (43008, 14784, 13)}
TILEFOUNDRY_ROWS = 2
WORK_LEVERS = {"one reciprocal per block": "recip", "unpadded tile (32 + 16 + 8 blocks)": "unpadded"}
ROWS2_LEVER = "2 rows per program"


def load(machine: str | None = records.COMMITTED) -> dict:
    """The files the GPU sections read (None where missing), from ``machine``'s recording (the
    committed one by default; None: the recording this reader's page would show)."""
    return {"quant": recorded("fp8_quant", machine), "candidates": recorded("fp8_candidates", machine),
            "cost": recorded("fp8_exactness_cost", machine)}


def _exactness(quant: dict | None) -> dict | None:
    row = next((r for r in ch08_page.exactness_rows(quant) if r["version"] == "fp8.fused"), None)
    if not row:
        return None
    prov = quant.get("provenance") or {}
    return dict(row, gpu=prov.get("gpu"), config=prov.get("fused_config"),
                baseline=prov.get("baseline_config"),
                tuned=config_parts(prov.get("fused_config")),
                untuned=config_parts(prov.get("baseline_config")))


def config_parts(label: str | None) -> dict | None:
    """A recorded configuration label read into its parts: "warps 4, unpadded (split) tile,
    block reciprocal division" -> warps 4, no register cap, split tile, one reciprocal per block,
    not lean."""
    if not label:
        return None
    parts = [p.strip() for p in label.split(",")]

    def number(word):
        return next((int(p.split()[1]) for p in parts
                     if p.split()[0] == word and p.split()[1:2] and p.split()[1].isdigit()), None)
    return {"warps": number("warps"), "maxnreg": number("maxnreg"),
            "split": any("split" in p for p in parts),
            "block_reciprocal": "block reciprocal division" in parts,
            "per_element_division": "per element division" in parts,
            "lean": "lean block steps" in parts}


def tile_words(parts: dict) -> str:
    """How the prose names a configuration's tile: "padded tile", "unpadded tile", and "with the
    lean block steps" where it has them."""
    tile = "unpadded tile" if parts["split"] else "padded tile"
    return f"{tile} with the lean block steps" if parts["lean"] else tile


def _candidates(cand_doc: dict | None) -> dict | None:
    """The candidates at the chapter's width: how many, how many passed, what each check ran."""
    cands = [r for r in ch08.candidate_table(cand_doc or {"records": []}) if isinstance(r, dict)]
    if not cands:
        return None
    shapes = ch08_tuning.check_shapes_at(HIDDEN_SIZE)
    seeds = 2
    return {"count": len(cands), "passed": sum(r.get("bit_exact") is True for r in cands),
            "checks_each": sorted({r.get("exact_checks") for r in cands if r.get("exact_checks")}),
            "random": len(shapes) * seeds, "codes": sum(r * c for r, c in shapes) * seeds}


def _timing(quant: dict | None) -> dict | None:
    rows = ch08.timing_rows(quant) if quant else []
    if not rows:
        return None
    band = ch08.timing_tie_band(rows)
    # the fewest rows whose call moves 64 MB or more: where the floor goal starts
    mid = next((r for r in rows if r["fused_MB"] * 1e6 >= ch08.MIN_BYTES), None)
    return {"rows": rows, "last": rows[-1], "small": rows[0], "band": band, "mid": mid,
            "call": ch08.python_call(quant),
            "processes": min(r.get("processes", 1) for r in rows),
            "faster": sum(r["speedup"] > 1 + (band or 0) for r in rows),
            "inside_band": [r["rows"] for r in rows if band is not None
                            and abs(r["speedup"] - 1) <= band]}


def _served_tuning(cand_doc: dict | None, quant: dict | None) -> dict | None:
    """The served contract's own winner beside the exact contract's, both timed under the served
    contract among the recorded candidates, at the most rows timed."""
    prov = (quant or {}).get("provenance") or {}
    labels = prov.get("served_config"), prov.get("fused_config")
    cands = {r.get("label"): r for r in ch08.candidate_table(cand_doc or {"records": []})
             if r.get("served_bit_exact") is True}
    if not all(labels) or not all(l in cands for l in labels):
        return None
    served, exact = (cands[l] for l in labels)
    rows = max(int(k.rsplit("_", 1)[1]) for k in served if k.startswith("served_graph_us_"))
    key = f"served_graph_us_{rows}"
    if key not in exact:
        return None
    return {"rows": rows, "served": config_parts(labels[0]), "exact": config_parts(labels[1]),
            "served_us": served[key], "exact_us": exact[key]}


def _levers(cand_doc: dict | None, timing: dict | None) -> dict | None:
    """The levers the page's table keeps: those beyond the timing's tie band."""
    band = (timing or {}).get("band")
    levers = {l["lever"]: l for l in ch08.fp8_levers(cand_doc, band=band)}
    return levers or None


def _cost(cost_doc: dict | None, fused_label: str | None) -> dict | None:
    rows = ch08.exactness_cost_rows(cost_doc) if cost_doc else []
    if not rows:
        return None
    big = max(rows, key=lambda r: r["bytes"])
    shape = f"{big['rows']}x{big['cols']}"
    at = next(r for r in ch08_page.cost_table(rows) if r["shape"] == shape)
    folder = cost_doc.get("source", {}).get("folder")
    return dict(at, rows=big["rows"], cols=big["cols"],
                instructions=ch08_page.instruction_comparison(cost_doc, fused_label),
                ncu=ch08_page.ncu_numbers(folder) if folder else None)


def _prices(cost_doc: dict | None) -> dict | None:
    prices = ch08_page.lever_prices(ch08.exactness_cost_rows(cost_doc)) if cost_doc else []
    if not prices:
        return None
    rows = sorted({r["rows"] for r in prices})
    at = {r["impl"]: r for r in prices if r["rows"] == rows[-1]}
    small = {r["impl"]: r for r in prices if r["rows"] == rows[0]}
    return {"rows": rows[-1], "cols": prices[0]["cols"], "at": at, "small_rows": rows[0],
            "small": small, "band": ch08_page.lever_band(prices),
            "round_count": min(r["round_count"] for r in prices)}


def _rounds_words(count: int) -> str:
    """What the price list's band spans (``ch08.round_spread``): every round, or the middle ones."""
    if count < ch08.TRIMMED_FROM_ROUNDS:
        return "rounds"
    return f"the middle {count - 2} of {count} rounds"


def story_facts(docs: dict) -> dict:
    """The numbers behind the prose, unformatted (a part is absent where its file is)."""
    out: dict = {}
    timing = _timing(docs["quant"])
    parts = {"exact": _exactness(docs["quant"]), "candidates": _candidates(docs["candidates"]),
             "timing": timing, "levers": _levers(docs["candidates"], timing),
             "served_tuning": _served_tuning(docs["candidates"], docs["quant"]),
             "cost": _cost(docs["cost"], ((docs["quant"] or {}).get("provenance") or {})
                           .get("fused_config")),
             "prices": _prices(docs["cost"])}
    for name, part in parts.items():
        if part:
            out[name] = part
    if docs["cost"]:
        out["cost_rows"] = ch08.exactness_cost_rows(docs["cost"])
    return out


def _change(pct: float) -> str:
    return f"{abs(pct):.0f}%"  # the prose says which way, a test holds it


def story_values(docs: dict) -> dict[str, str]:
    """Every value the GPU sections' prose shows, formatted (absent where not recorded)."""
    f = story_facts(docs)
    v: dict[str, str] = {}
    e = f.get("exact")
    if e:
        v.update(ex_gpu=e["gpu"] or "the GPU", ex_checks=str(e["checks"]),
                 ex_codes=f"{e['codes compared']:,}")
        if e["tuned"] and e["tuned"]["warps"]:
            v["ex_warps"] = str(e["tuned"]["warps"])
        if e["untuned"] and e["untuned"]["warps"] and e["untuned"]["maxnreg"]:
            v.update(ex_base_warps=str(e["untuned"]["warps"]),
                     ex_base_regs=str(e["untuned"]["maxnreg"]))
    c = f.get("candidates")
    if c:
        v.update(cand_count=str(c["count"]), cand_random=str(c["random"]),
                 cand_codes=f"{c['codes']:,}")
        if len(c["checks_each"]) == 1:
            v.update(cand_checks=str(c["checks_each"][0]),
                     cand_edge=str(c["checks_each"][0] - c["random"]))
    t = f.get("timing")
    if t:
        last, small = t["last"], t["small"]
        v.update(t_shapes=str(len(t["rows"])), t_rows=f"{last['rows']:,}",
                 t_naive_us=f"{last['naive_us']:.1f} µs", t_fused_us=f"{last['fused_us']:.1f} µs",
                 t_speedup=f"{last['speedup']:.2f}x", t_small_rows=f"{small['rows']:,}",
                 t_small_speedup=f"{small['speedup']:.2f}x", t_processes=str(t["processes"]))
        if last.get("bytes_ratio"):
            v.update(t_bytes_ratio=f"{last['bytes_ratio']:.2f}x",
                     t_bytes_pct=f"{100 / last['bytes_ratio']:.0f}%")
        if t["band"] is not None:
            v["t_band"] = f"±{100 * t['band']:.1f}%"
        if last["pct_floor"] is not None:
            v.update(t_pct_floor=f"{last['pct_floor']:.0f}%", t_floor_us=f"{last['floor_us']:.1f} µs")
        # the served contract, fp8.fused as the library runs it
        v.update(sv_us=f"{last['served_us']:.1f} µs",
                 sv_vs_exact=f"{last['fused_us'] / last['served_us']:.2f}x")
        if last["served_pct_floor"] is not None:
            v["sv_pct"] = f"{last['served_pct_floor']:.0f}%"
        mid = t["mid"]
        if mid and mid is not last and mid["served_pct_floor"] is not None:
            v.update(sv_mid_rows=f"{mid['rows']:,}", sv_mid_pct=f"{mid['served_pct_floor']:.0f}%",
                     sv_mid_mb=f"{mid['fused_MB']:.0f} MB")
            at = next((r for r in ch08_page.cost_table(f.get("cost_rows", []))
                       if r["shape"] == f"{mid['rows']}x{mid['cols']}"), None)
            if at and at["diagnostic % of floor"] is not None:  # what no exactness buys there
                v["sv_mid_diag_pct"] = f"{at['diagnostic % of floor']:.0f}%"
        call = t["call"]
        if call:
            v.update(pc_fused=f"{call['fused_call_us']:.1f} µs",
                     pc_rms=f"{call['rms_norm_call_us']:.1f} µs", pc_ratio=f"{call['ratio']:.2f}x")
    st = f.get("served_tuning")
    if st and st["served"]["warps"]:
        v.update(st_warps=str(st["served"]["warps"]), st_rows=f"{st['rows']:,}",
                 st_tile=tile_words(st["served"]), st_exact_tile=tile_words(st["exact"]),
                 st_us=f"{st['served_us']:.1f} µs", st_exact_us=f"{st['exact_us']:.1f} µs")
    lv = f.get("levers")
    if lv:
        for name, key in WORK_LEVERS.items():
            if name in lv:
                v[f"lv_{key}"] = _change(lv[name]["change_pct"])
        if ROWS2_LEVER in lv:
            r2 = lv[ROWS2_LEVER]
            v.update(lv_rows2=_change(r2["change_pct"]), lv_rows2_regs=f"{r2['registers_before']} "
                     f"to {r2['registers_after']}")
    k = f.get("cost")
    if k and k["exact µs"] and k["diagnostic µs"]:
        v.update(cost_shape=f"{k['rows']:,} × {k['cols']:,}",
                 cost_diag_us=f"{k['diagnostic µs']:.1f} µs",
                 cost_exact_us=f"{k['exact µs']:.1f} µs",
                 cost_codes=f"{k['codes differing']:,}",
                 cost_all_codes=f"{k['rows'] * k['cols']:,}")
        if k["exact % of floor"] is not None:
            v.update(cost_diag_pct=f"{k['diagnostic % of floor']:.0f}%",
                     cost_exact_pct=f"{k['exact % of floor']:.0f}%")
        ipe = k["instructions"]
        if ipe:
            v.update(ipe_exact=f"{ipe['exact']:.0f}", ipe_approx=f"{ipe['approx']:.0f}",
                     ipe_warps=str(ipe["warps"]))
        n = k["ncu"]
        if n and n["per_element"] and n["issue_busy_pct"] and n["dram_pct"]:
            v.update(ncu_rows=f"{n['rows']:,}", ncu_per_element=f"{n['per_element']:.0f}",
                     ncu_issue=f"{n['issue_busy_pct']:.0f}%", ncu_dram=f"{n['dram_pct']:.0f}%")
    p = f.get("prices")
    if p and {"lever.none", "lever.pairwise_reciprocal"} <= set(p["at"]):
        at, band = p["at"], p["band"]
        v.update(pr_shape=f"{p['rows']:,} × {p['cols']:,}", pr_band=f"±{100 * band:.1f}%",
                 pr_rounds=_rounds_words(p["round_count"]),
                 pr_total_codes=f"{p['rows'] * p['cols']:,}",
                 pr_spec_us=f"{at['lever.none']['us']:.1f} µs",
                 pr_spec_pct=f"{at['lever.none']['pct_of_floor']:.0f}%")
        for impl, key in (("lever.pairwise_sum", "pairwise"), ("lever.any_order_sum", "anyorder"),
                          ("lever.rsqrt", "rsqrt"), ("lever.reciprocal", "recip"),
                          ("lever.pairwise_reciprocal", "both"), ("lever.all_three", "all")):
            if impl in at:
                r = at[impl]
                v[f"pr_{key}"] = _change(100 * (1 - r["vs_spec"]))
                v[f"pr_{key}_pct"] = f"{r['pct_of_floor']:.0f}%"
                v[f"pr_{key}_us"] = f"{r['us']:.1f} µs"
                v[f"pr_{key}_codes"] = f"{r['codes_moved']:,}"
        if "lever.pairwise_reciprocal" in p["small"]:
            v.update(pr_small_rows=f"{p['small_rows']:,}",
                     pr_small_both_pct=f"{p['small']['lever.pairwise_reciprocal']['pct_of_floor']:.0f}%")
    return v


def your_gpu_rows(own: dict, book: dict) -> list[dict] | None:
    """The chapter's measured answers on the reader's GPU beside the book's (None when the reader
    has not recorded chapter 8)."""
    if not (own["quant"] or own["cost"]):
        return None
    from .story import beside

    theirs = story_facts(book)
    rows = [
        ("fused over naive pair, most rows timed", lambda f: f"{f['timing']['last']['speedup']:.2f}x"),
        ("fused kernel's share of its copy floor",
         lambda f: f"{f['timing']['last']['pct_floor']:.0f}%"),
        ("fp8.fused (served contract), % of floor",
         lambda f: f"{f['timing']['last']['served_pct_floor']:.0f}%"),
        ("exact kernel, % of floor (cost table)", lambda f: f"{f['cost']['exact % of floor']:.0f}%"),
        ("diagnostic kernel, % of floor", lambda f: f"{f['cost']['diagnostic % of floor']:.0f}%"),
    ]
    label = ((theirs.get("exact") or {}).get("gpu") or "H200") + " (the book)"
    return beside(rows, story_facts(own), theirs, label)
