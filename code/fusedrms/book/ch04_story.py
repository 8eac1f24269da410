"""Chapter 4's story values: the register limit, the looped and multirow kernels, the num_warps
sweep, the bf16 census and the compiled kernel, as the committed recording has them (the pattern:
:mod:`fusedrms.book.story`)."""
from __future__ import annotations

from .. import records
from ..dtypes import short
from ..kernels.rmsnorm import ROW_MAX_COLS
from . import ch04
from .story import MISSING, recorded, beside, value  # noqa: F401 (the notebook reads story.value)

SEED = (1024, 4096, "float32")  # the book's running example


def load(machine: str | None = records.COMMITTED) -> dict:
    """The records the chapter reads (empty lists where missing), from ``machine``'s recording
    (the committed one by default; None: the recording this reader's page would show)."""
    asm = recorded("triton_row_asm", machine)
    registers = [r for r in (asm or {}).get("records", []) if r.get("kind") == "registers"]
    if not registers:  # recorded before chapter 4 compiled the widths itself: chapter 2's
        registers = (recorded("traffic_row_registers", machine) or {}).get("records", [])
    versions = [r for r in (recorded("triton_versions", machine) or {}).get("records", [])
                if r.get("median_us") is not None and r.get("correct")]
    rounding = recorded("triton_bf16_rounding", machine)
    gpu = ((rounding or asm or {}).get("provenance") or {}).get("gpu") or "GPU"
    return {"registers": registers, "versions": versions,
            "warps": (recorded("triton_warps", machine) or {}).get("records", []),
            "rounding": (rounding or {}).get("records", []),
            "assembly": [r for r in (asm or {}).get("records", [])
                         if r.get("kind") in ("ptx", "amdgcn")],
            "gpu": gpu.removeprefix("NVIDIA ").removeprefix("AMD ")}


def _sweep_shapes(recs: list) -> dict:
    """What the num_warps sweep timed: its settings, and its width sweep's rows, widths, dtypes."""
    swept = [r for r in recs if r.get("group") != "seed shape"]
    return {"settings": sorted({int(r["num_warps"]) for r in recs}),
            "seed": sorted({(r["rows"], r["cols"], r["dtype"]) for r in recs
                            if r.get("group") == "seed shape"}),
            "rows": sorted({int(r["rows"]) for r in swept}),
            "widths": sorted({int(r["cols"]) for r in swept}),
            "dtypes": sorted({short(r["dtype"]) for r in swept})}


WIDE_FROM = 4096  # columns: where the spread of the num_warps settings is told apart
SEED_MISS = ("1024x4096", "float32")  # the running example


def story_facts(docs: dict) -> dict:
    """The numbers behind the prose, unformatted (a section is absent where its file is)."""
    out: dict = {}
    widths = ch04.spill_widths(docs["registers"])
    if widths["widest_clean"] and widths["first_spill"]:
        out["registers"] = dict(widths, limit=ROW_MAX_COLS)
    versions, warps = docs["versions"], docs["warps"]
    tie = ch04.tie_band(warps, versions)
    band = tie["band"]
    if versions:
        out["versions"] = ch04.version_ratios(versions, ROW_MAX_COLS)
    if warps and band is not None:
        sweep = ch04.summarize_warps(warps, band)
        times = [{int(k.split()[0]): v for k, v in r.items() if k.endswith(" warps us")}
                 for r in sweep["rows"]]
        ties = sum(sum(t <= (1 + band) * min(ts.values()) for t in ts.values()) >= 2
                   for ts in times)
        judged = [r for r in sweep["rows"] if r.get("rule ties fastest") in ("yes", "no")]
        # slowest over fastest setting, per shape, narrow rows (< 4,096 columns) apart
        spreads = [(max(ts.values()) / min(ts.values()), r) for ts, r in zip(times, sweep["rows"])]
        narrow = [sp for sp in spreads if int(sp[1]["shape"].split("x")[1]) < WIDE_FROM]
        wide = [sp for sp in spreads if int(sp[1]["shape"].split("x")[1]) >= WIDE_FROM]
        out["warps"] = dict(tie=tie, band=band, shapes=len(sweep["rows"]), judged=len(judged),
                            ties=ties, rule_hits=sweep["rule_hits"], misses=sweep["misses"],
                            narrow_spread=max(narrow, key=lambda sp: sp[0]) if narrow else None,
                            wide_spread=max(wide, key=lambda sp: sp[0]) if wide else None,
                            **_sweep_shapes(warps))
    if docs["rounding"]:
        out["rounding"] = max(docs["rounding"], key=lambda r: r["elements"])
    fp32 = next((s for s in docs["assembly"] if str(s.get("dtype", "")).startswith("float32")),
                None)
    if fp32:
        out["compiled"] = dict(fp32, load_bytes=ch04._load_bytes(fp32))
    out["gpu"] = docs["gpu"]
    return out


def _times(x: float) -> str:
    return f"{x:.2f}×"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _shape(rows, cols, dtype=None) -> str:
    return ch04._shape_text(rows, cols, dtype)


def story_values(docs: dict) -> dict[str, str]:
    """Every value the chapter's prose shows, formatted (absent where not recorded)."""
    f = story_facts(docs)
    v: dict[str, str] = {"gpu": f["gpu"]}
    r = f.get("registers")
    if r:
        clean, spill = r["widest_clean"], r["first_spill"]
        v.update(clean_cols=f"{clean['cols']:,}", clean_regs=str(clean["registers"]),
                 spill_cols=f"{spill['cols']:,}", spill_regs=str(spill["registers"]),
                 spill_values=f"{spill['spills']:,}", spill_bytes=f"{4 * spill['spills']:,}")
    ver = f.get("versions")
    if ver and ver["looped_cost"] and all(ver["multirow"].values()):
        v.update(looped_cost=_times(ver["looped_cost"]), looped_bytes=_times(ver["looped_bytes"]),
                 multirow_128=f"{ver['multirow'][128]:.1f}×",
                 multirow_256=f"{ver['multirow'][256]:.1f}×",
                 seed_spread=_pct(ver["seed_spread"] - 1) if ver["seed_spread"] else MISSING)
    w = f.get("warps")
    if w:
        v.update(warps_band=_pct(w["band"]), warps_shapes=str(w["shapes"]),
                 warps_ties=str(w["ties"]), warps_hits=str(w["rule_hits"]),
                 warps_judged=str(w["judged"]),
                 warps_settings=", ".join(map(str, w["settings"][:-1]))
                 + f" and {w['settings'][-1]}",
                 warps_rows=" and ".join(f"{n:,}" for n in w["rows"]),
                 warps_from=f"{w['widths'][0]:,}", warps_to=f"{w['widths'][-1]:,}",
                 warps_dtypes=" and ".join(w["dtypes"]))
        if w["tie"]["repeats"] is not None:
            v["tie_repeats"] = _pct(w["tie"]["repeats"])
        again = w["tie"]["again"]
        if again:
            v.update(tie_again=_pct(again["diff"]),
                     tie_again_shape=_shape(again["rows"], again["cols"], again["dtype"]))
        for key in ("narrow_spread", "wide_spread"):
            if w[key]:
                ratio, row = w[key]
                v[key] = f"{ratio - 1:.0%}"
                v[key + "_shape"] = _shape(*row["shape"].split("x"), row["dtype"])
        # the running example's miss first, then any other
        misses = sorted(w["misses"], key=lambda m: (m["shape"], m["dtype"]) != SEED_MISS)
        if misses:
            v["warps_misses"] = str(len(misses))
        for prefix, m in zip(("miss", "miss2"), misses):
            v.update({f"{prefix}_shape": _shape(*m["shape"].split("x"), m["dtype"]),
                      f"{prefix}_rule": str(m["rule"]),
                      f"{prefix}_rule_us": f"{m['rule_us']:.2f} µs",
                      f"{prefix}_best": str(m["fastest"]),
                      f"{prefix}_best_us": f"{m['fastest_us']:.2f} µs",
                      f"{prefix}_pct": f"{m['rule_us'] / m['fastest_us'] - 1:.1%}"})
    c = f.get("rounding")
    if c:
        v.update(census_shape=_shape(c["rows"], c["cols"]), census_total=f"{c['elements']:,}",
                 census_nearest=f"{c['equal_to_nearest_even']:,}",
                 census_truncation_off=f"{1 - c['equal_to_truncation'] / c['elements']:.0%}",
                 census_one_step=f"{c['one_step_from_nearest_even']:,}")
    p = f.get("compiled")
    if p and p["load_bytes"]:
        v.update(ptx_load_bytes=str(p["load_bytes"]), ptx_load_values=str(p["load_bytes"] // 4),
                 ptx_shuffles=str(p.get("butterfly_shuffles")),
                 ptx_barriers=str(p.get("barriers")),
                 ptx_registers=str(p.get("registers_per_thread")))
    return v


def your_gpu_rows(own: dict, h200: dict) -> list[dict] | None:
    """The chapter's measured answers on the reader's GPU beside the H200's (None when the reader
    has not recorded chapter 4)."""
    if not (own["versions"] or own["warps"]):
        return None
    theirs = story_facts(h200)
    rows = [
        (f"looped over row kernel, 1024×{ROW_MAX_COLS:,} fp32",
         lambda f: _times(f["versions"]["looped_cost"])),
        ("multirow speedup at 128 columns", lambda f: f"{f['versions']['multirow'][128]:.1f}×"),
        ("num_warps: the rule ties the fastest at",
         lambda f: f"{f['warps']['rule_hits']} of {f['warps']['judged']} shapes"),
        ("tie band (repeated measurements)", lambda f: _pct(f["warps"]["band"])),
    ]
    return beside(rows, story_facts(own), theirs, f"{theirs['gpu']} (the book)")
