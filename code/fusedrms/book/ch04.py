"""Chapter 4's companion: what the chapter shows of the compiled Triton kernel, its measurements,
and the GPU recording.

``record(out_dir)`` writes ``triton_row_ptx.txt`` + ``triton_row_asm.json`` (the row kernel's PTX,
AMDGCN on ROCm, and a summary), ``triton_bf16_rounding.json`` (GPU bf16 outputs against
round-to-nearest-even and truncation), ``triton_warps.json`` (num_warps 4/8/16 at the seed shape
and by width) and ``triton_versions.json`` (row / looped / multirow where each one matters).
Kernel times come from :func:`fusedrms.measure.timer.time_rotating_us`.
"""
from __future__ import annotations

from .. import env  # first: decides GPU or interpreter before any @triton.jit

import time
import traceback
from pathlib import Path

import torch
import triton

from .. import checks, records, reference
from ..kernels.rmsnorm import (MAX_COLS, VERSIONS, bytes_moved, num_warps_for, rmsnorm_row,
                               rmsnorm_row_kernel)
from ..measure import compare, timer

# ---------------------------------------------------------------- what chapter 4 shows of the compiled kernel

def compiled_kernel(kernel, *args, **kwargs):
    """Launch ``kernel[grid](*args, **kwargs)`` on a GPU and return the compiled kernel object.

    Its ``.asm`` dict holds ``"ptx"`` (NVIDIA) or ``"amdgcn"`` (AMD); ``.n_regs`` the registers per
    thread where the driver reports them. ``grid`` is taken from ``kwargs.pop("grid")``.
    """
    env.require_gpu("reading the compiled kernel")
    grid = kwargs.pop("grid")
    return kernel[grid](*args, **kwargs)


def row_kernel_compiled(cols: int = 4096, dtype: torch.dtype = torch.float32, rows: int = 4,
                        num_warps: int | None = None):
    """Compile (by launching) the row kernel for one width and dtype; returns the compiled kernel."""
    x = torch.randn(rows, cols, device=env.current().device, dtype=dtype)
    w = torch.ones(cols, device=x.device, dtype=dtype)
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    return compiled_kernel(rmsnorm_row_kernel, x, w, y, cols, x.stride(0), y.stride(0), 1e-5,
                           grid=(rows,), BLOCK_SIZE=block,
                           num_warps=num_warps or num_warps_for(block))


def assembly_summary(asm: str, kind: str = "ptx") -> dict:
    """What to look for in the compiled row kernel: vector loads/stores and the reduction.

    For PTX: ``ld.global.v4``/``v2`` (vector width of global loads), ``st.global``,
    ``shfl.sync.bfly`` (butterfly shuffles of the warp reduction), ``bar.sync`` (block barrier of
    the cross-warp step), ``ld.shared``/``st.shared`` and ``rsqrt``. For AMDGCN the analogues.
    """
    import re

    asm = re.sub(r"//.*", "", asm)  # comments name functions such as __nv_rsqrtf; skip them

    def count(pattern):
        return len(re.findall(pattern, asm))

    if kind == "ptx":
        loads = re.findall(r"ld\.global\S*", asm)
        vector = [m for m in loads if re.search(r"\.v(2|4|8)\b", m)]
        widths = sorted({int(re.search(r"\.v(\d)", m).group(1)) for m in vector}) or [1]
        return {
            "kind": "ptx",
            "global_loads": len(loads),
            "global_load_forms": sorted(set(loads)),
            "widest_global_load_vector": max(widths),
            "global_stores": count(r"st\.global"),
            "global_store_forms": sorted(set(re.findall(r"st\.global\S*", asm))),
            "butterfly_shuffles": count(r"shfl\.sync\.bfly"),
            "barriers": count(r"bar\.sync|barrier\.sync"),
            "shared_loads": count(r"ld\.shared"),
            "shared_stores": count(r"st\.shared"),
            "rsqrt": count(r"rsqrt"),
            "lines": asm.count("\n"),
        }
    loads = re.findall(r"global_load_[a-z0-9_]+|buffer_load_[a-z0-9_]+", asm)
    return {
        "kind": kind,
        "global_loads": len(loads),
        "global_load_forms": sorted(set(loads)),
        "global_stores": count(r"global_store_|buffer_store_"),
        "cross_lane_ops": count(r"ds_swizzle|dpp|ds_bpermute|permlane"),
        "barriers": count(r"s_barrier"),
        "rsqrt": count(r"rsq"),
        "lines": asm.count("\n"),
    }


LANDMARKS = {  # what chapter 4 points at in the compiled row kernel
    "ptx": (r"ld\.global", r"shfl\.sync\.bfly", r"bar\.sync", r"rsqrt", r"st\.global"),
    "amdgcn": (r"global_load|buffer_load", r"ds_swizzle|dpp|ds_bpermute", r"s_barrier", r"rsq",
               r"global_store|buffer_store"),
}


def assembly_excerpt(asm: str, kind: str = "ptx", per_landmark: int = 3) -> str:
    """The first few lines of each landmark (loads, shuffles, barrier, rsqrt, stores), numbered."""
    import re

    lines = asm.splitlines()
    picked: list[int] = []
    for pattern in LANDMARKS.get(kind, LANDMARKS["ptx"]):
        hits = [i for i, line in enumerate(lines) if re.search(pattern, re.sub(r"//.*|;.*", "", line)
                                                                if kind == "amdgcn" else
                                                                re.sub(r"//.*", "", line))]
        picked.extend(hits[:per_landmark])
    out, last = [], None
    for i in sorted(set(picked)):
        if last is not None and i > last + 1:
            out.append("    ...")
        out.append(f"{i + 1:5d}  {lines[i].strip()}")
        last = i
    return "\n".join(out)


def bf16_truncate(t: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 by dropping the low 16 bits (what the Triton interpreter's cast does)."""
    bits = t.to(torch.float32).contiguous().view(torch.int32) & -65536  # 0xFFFF0000
    return bits.view(torch.float32).to(torch.bfloat16)  # exact: the value is already a bf16


def bf16_rounding_census(actual: torch.Tensor, exact_fp32: torch.Tensor) -> dict:
    """How a kernel's bf16 output relates to the fp32 result rounded two ways.

    ``nearest`` is torch's round-to-nearest-even cast (what a GPU does), ``truncated`` drops the low
    bits (the Triton interpreter). Counts elements equal to each, and distances in bf16 steps.
    """
    if actual.dtype != torch.bfloat16:
        raise ValueError(f"actual must be bfloat16, got {actual.dtype}")
    a = actual.detach().cpu()
    e = exact_fp32.detach().cpu().to(torch.float32)
    nearest, truncated = e.to(torch.bfloat16), bf16_truncate(e)
    steps_nearest = checks.ulp_distance(a, nearest)
    steps_trunc = checks.ulp_distance(a, truncated)
    return {
        "elements": a.numel(),
        "equal_to_nearest_even": int((steps_nearest == 0).sum()),
        "one_step_from_nearest_even": int((steps_nearest == 1).sum()),
        "more_than_one_step_from_nearest_even": int((steps_nearest > 1).sum()),
        "equal_to_truncation": int((steps_trunc == 0).sum()),
        "nearest_and_truncation_differ": int((nearest != truncated).sum()),
        "max_steps_from_nearest_even": int(steps_nearest.max()) if a.numel() else 0,
    }


def measure_num_warps(rows: int, cols: int, dtype: torch.dtype = torch.float32,
                      warps=(4, 8, 16), eps: float = 1e-5) -> dict:
    """µs per call of the row kernel for each ``num_warps`` (GPU only; :func:`time_rotating_us`).
    Checks each setting's output first."""
    env.require_gpu("measuring num_warps")
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    w = torch.randn(cols, device="cuda", dtype=dtype)
    expected = reference.rmsnorm(x, w, eps, accum=torch.float64)
    out = {}
    for nw in warps:
        report = checks.allclose(rmsnorm_row(x, w, eps, num_warps=nw), expected)
        if not report:
            raise RuntimeError(f"num_warps={nw} gave a wrong result: {report}")
        out[nw] = timer.time_rotating_us(lambda xi, wi, nw=nw: rmsnorm_row(xi, wi, eps, num_warps=nw),
                                         x, w, bytes_moved(rows, cols, dtype))[0]
    return out


def repeat_medians(rec: dict) -> list[float]:
    """A timed record's repeated measurements: all of them where recorded, else min, median and
    max (exactly the three of a three-repeat record), else none."""
    if rec.get("repeat_medians_us"):
        return [float(v) for v in rec["repeat_medians_us"]]
    if rec.get("repeats") == 3 and rec.get("min_us") is not None and rec.get("max_us") is not None:
        return [float(rec["min_us"]), float(rec["median_us"]), float(rec["max_us"])]
    return []


def tie_band(warps_recs: list, versions_recs: list) -> dict:
    """The difference this page counts as a tie, derived from the recording, never asserted:
    ``repeats`` (:func:`fusedrms.measure.compare.tie_band` over every setting's repeated
    measurements), ``again`` (the row kernel with the rule's warps, measured in both the sweep and
    the variants' run: ``{"rows", "cols", "dtype", "diff"}`` for the largest difference) and
    ``band``, the larger of the two (None when neither is recorded)."""
    timed = [{"status": "ok", "median_us": r["median_us"], "process_medians_us": repeat_medians(r)}
             for r in (warps_recs or []) + (versions_recs or []) if r.get("median_us")]
    repeats = compare.tie_band(timed)
    again = None
    for v in versions_recs or []:
        for w in warps_recs or []:
            if (v.get("variant") == "triton.row" and v.get("median_us") and w.get("median_us")
                    and (v["rows"], v["cols"], v["dtype"]) == (w["rows"], w["cols"], w["dtype"])
                    and w.get("num_warps") == w.get("rule_num_warps")):
                a, b = sorted((float(v["median_us"]), float(w["median_us"])))
                if again is None or b / a - 1 > again["diff"]:
                    again = {"rows": v["rows"], "cols": v["cols"], "dtype": v["dtype"],
                             "diff": b / a - 1}
    found = [x for x in (repeats, again and again["diff"]) if x is not None]
    return {"repeats": repeats, "again": again, "band": max(found) if found else None}


def summarize_warps(recs: list, tie: float | None = None) -> dict:
    """Chapter 4's reading of the recorded num_warps sweep (``triton_warps.json`` records).

    Returns ``{"rows": [one dict per shape], "winners": sorted fastest settings, "rule_hits": n,
    "misses": [shapes where the rule is more than the tie band ``tie`` slower, with both times]}``;
    each row has the shape, the median per setting (``"<n> warps us"``), the fastest setting, the
    book's rule and whether the rule ties with the fastest. Malformed records are skipped.
    """
    tie = tie or 0.0
    by_shape: dict = {}
    for r in recs or []:
        try:
            key = (int(r["rows"]), int(r["cols"]), str(r["dtype"]))
            by_shape.setdefault(key, {})[int(r["num_warps"])] = (float(r["median_us"]),
                                                                 r.get("gbps"), r)
        except (KeyError, TypeError, ValueError):
            continue
    rows, winners, hits, misses = [], set(), 0, []
    for (n_rows, cols, dtype), per in sorted(by_shape.items(), key=lambda kv: (kv[0][2], kv[0][1],
                                                                               kv[0][0])):
        best = min(per, key=lambda k: per[k][0])
        rule = num_warps_for(triton.next_power_of_2(cols))
        row = {"shape": f"{n_rows}x{cols}", "dtype": dtype}
        row.update({f"{nw} warps us": per[nw][0] for nw in sorted(per)})
        gbps = per[best][1]
        row.update({"fastest": best, "GB/s best": float(gbps) if gbps is not None else None,
                    "rule": rule})
        if rule not in per:
            row["rule ties fastest"] = "not measured"
        else:
            ok = per[rule][0] <= (1 + tie) * per[best][0]
            row["rule ties fastest"] = "yes" if ok else "no"
            hits += ok
            if not ok:
                misses.append({"shape": row["shape"], "dtype": dtype, "rule": rule,
                               "rule_us": per[rule][0], "fastest": best,
                               "fastest_us": per[best][0]})
        rows.append(row)
        winners.add(best)
    return {"rows": rows, "winners": sorted(winners), "rule_hits": hits, "misses": misses}


def spill_widths(recs: list) -> dict:
    """Chapter 2's register records (``traffic_row_registers``): the widest fp32 row the row kernel
    holds without spilling and the first that spills, each with registers and spills per thread
    (``None`` where the records do not show one)."""
    rows = []
    for r in recs or []:
        try:
            rows.append((int(r["cols"]), int(r["registers_per_thread"]), int(r["spills"] or 0)))
        except (KeyError, TypeError, ValueError):
            continue
    rows.sort()
    clean = [r for r in rows if r[2] == 0]
    spilled = [r for r in rows if r[2] > 0]
    as_dict = (lambda r: {"cols": r[0], "registers": r[1], "spills": r[2]})
    return {"widest_clean": as_dict(clean[-1]) if clean else None,
            "first_spill": as_dict(spilled[0]) if spilled else None}


ROUTES = ("hip", "triton", "torch", "capstone", "fp8")


def side_by_side(docs: list, fallback_shape=(1024, 4096, "float32")) -> dict:
    """Recorded medians of several routes at the shapes they share.

    ``docs`` is a list of ``(doc_or_None, route)``; ``route`` (``"hip"``, ``"triton"``) labels
    records whose name does not already start with a route. A record's name is its ``variant`` or
    ``name`` field (``hip_ladder`` uses ``name``; it also times ``triton.row``), plus its
    ``block_size`` when it has one; sweep records without a name become ``"triton.row, <n> warps"``.
    Records without ``median_us`` are skipped; GB/s comes from ``gbps`` or ``GBps``. Returns
    ``{"shared": shapes recorded by more than one route, "rows": the records at those shapes, or at
    ``fallback_shape`` (the seed chapter's) when no shape is shared}``.

    Pass records of one timing method only: medians from different timers (the ladder's cold
    flush, this chapter's rotating copies) are not comparable, and this function cannot tell them
    apart. Chapter 4 calls it once per timer.
    """
    found = []
    for doc, route in docs:
        for r in (doc or {}).get("records", []):
            try:
                variant = r.get("variant") or r.get("name")
                variant = str(variant) if variant else f"triton.row, {r['num_warps']} warps"
                if r.get("block_size"):
                    variant += f" (block {r['block_size']})"
                if not variant.startswith(ROUTES):
                    variant = f"{route}.{variant}"
                gbps = r.get("gbps", r.get("GBps"))
                found.append({"variant": variant, "route": variant.split(".")[0],
                              "rows": r.get("rows"), "cols": r.get("cols"), "dtype": r.get("dtype"),
                              "median_us": float(r["median_us"]),
                              "GB/s": float(gbps) if gbps is not None else None})
            except (AttributeError, KeyError, TypeError, ValueError):
                continue
    routes_at: dict = {}
    for r in found:
        routes_at.setdefault((r["rows"], r["cols"], r["dtype"]), set()).add(r["route"])
    shared = sorted((s for s, routes in routes_at.items() if len(routes) > 1), key=str)
    keep = set(shared) if shared else {tuple(fallback_shape)}
    rows = [r for r in found if (r["rows"], r["cols"], r["dtype"]) in keep]
    rows.sort(key=lambda r: (str(r["dtype"]), str(r["cols"]), str(r["rows"]), r["median_us"]))
    return {"shared": shared, "rows": rows}


# ---------------------------------------------------------------- what the page prints
# The prose is written about the committed recording (book/ch04_story.py reads its values); the
# readers below format what a cell computes or tabulates. They hold no measurements.

NOT_YET = "not recorded yet"


def _shape_text(rows, cols, dtype=None) -> str:
    """``1024×4,096 fp32``: the page's way of writing a shape."""
    from ..dtypes import short

    text = "×".join(f"{int(n):,}" if int(n) >= 10000 else str(int(n)) for n in (rows, cols))
    if dtype is None:
        return text
    try:
        return f"{text} {short(dtype)}"
    except ValueError:
        return f"{text} {dtype}"


def version_ratios(recs: list, wide_cols: int) -> dict:
    """What the versions bench says, as ratios (None where a time is missing): ``looped_cost``
    (looped / row at 1024 x ``wide_cols`` fp32), ``looped_bytes`` (the same ratio if the second
    read of x always came from DRAM), ``multirow`` ({cols: row / multirow} at 128 and 256 columns)
    and ``seed_spread`` (slowest / fastest variant at 1024x4096)."""
    def us(variant, rows, cols):
        return next((float(r["median_us"]) for r in recs or []
                     if r.get("variant") == variant and (r.get("rows"), r.get("cols")) == (rows, cols)
                     and r.get("median_us") and r.get("correct", True)), None)

    def ratio(a, b):
        return a / b if a and b else None

    once = bytes_moved(1024, wide_cols, torch.float32)
    seed = [t for t in (us(n, 1024, 4096) for n in dict.fromkeys(r.get("variant") for r in recs or []))
            if t]
    return {"looped_cost": ratio(us("triton.looped", 1024, wide_cols), us("triton.row", 1024, wide_cols)),
            "looped_bytes": (once + 1024 * wide_cols * 4) / once,
            "multirow": {c: ratio(us("triton.row", r, c), us("triton.multirow", r, c))
                         for r, c in ((65536, 128), (16384, 256))},
            "seed_spread": max(seed) / min(seed) if len(seed) >= 2 else None}


def _load_bytes(summary: dict):
    """Bytes the widest global load moves per thread (``ld.global.v4.b32``: 16), from the
    recorded load forms; else the vector width times 4 bytes; None when unknown."""
    import re

    best = None
    for form in summary.get("global_load_forms") or []:
        m = re.search(r"\.v(\d+)\.b(\d+)", form) or re.search(r"()\.b(\d+)", form)
        if m:
            size = int(m.group(1) or 1) * int(m.group(2)) // 8
            best = max(best or 0, size)
    if best is None and summary.get("widest_global_load_vector"):
        best = 4 * int(summary["widest_global_load_vector"])
    return best


COMPILED_ROWS = (  # (label, summary key or callable)
    ("warps per program", "num_warps"),
    ("registers per thread", "registers_per_thread"),
    ("spilled 32-bit values per thread", "spills"),
    ("widest global load (bytes per thread)", _load_bytes),
    ("global load instructions", "global_loads"),
    ("global store instructions", "global_stores"),
    ("butterfly shuffles", "butterfly_shuffles"),
    ("cross-lane operations", "cross_lane_ops"),
    ("barriers", "barriers"),
    ("shared-memory loads", "shared_loads"),
    ("rsqrt instructions", "rsqrt"),
)


def compiled_table(summaries: list) -> list[dict]:
    """The compiled row kernel's landmarks, one row per quantity and one column per dtype
    (a narrow table for a phone); quantities no summary has are left out."""
    def value(s, key):
        return key(s) if callable(key) else s.get(key)

    names = [str(s.get("dtype", "?")) for s in summaries]
    out = []
    for label, key in COMPILED_ROWS:
        vals = [value(s, key) for s in summaries]
        if any(v is not None for v in vals):
            out.append({"": label, **dict(zip(names, vals))})
    return out


# ---------------------------------------------------------------- the chapter's recording

FILES = {
    "triton_row_ptx.txt": "the row kernel's PTX (AMDGCN on ROCm), fp32, 4096 columns",
    "triton_row_asm.json": "a summary of that assembly, fp32 and bf16",
    "triton_bf16_rounding.json": "GPU bf16 outputs vs round-to-nearest-even and truncation",
    "triton_warps.json": "num_warps 4/8/16: the seed shape and widths 1024..16384",
    "triton_versions.json": "row / looped / multirow where each one matters",
}
ESTIMATE_S = 50  # H200 at 347eb14: 50 s, most of it compiling ~40 kernel configurations
SOURCES = ("kernels/rmsnorm.py", "measure/timer.py", "traffic.py", "book/ch04.py::record")


def _tag(dtype) -> str:
    return str(dtype).replace("torch.", "")


REGISTER_WIDTHS = (MAX_COLS["triton.row"], 2 * MAX_COLS["triton.row"])


def record_assembly(out_dir: Path, log=print, smoke: bool = False) -> None:
    kind = "amdgcn" if env.current().backend == "rocm" else "ptx"
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        k = row_kernel_compiled(cols=4096, dtype=dtype)
        asm = k.asm[kind]
        if dtype == torch.float32:
            (out_dir / "triton_row_ptx.txt").write_text(asm)
        s = assembly_summary(asm, kind)
        s.update(cols=4096, dtype=_tag(dtype), block_size=4096, num_warps=num_warps_for(4096),
                 registers_per_thread=getattr(k, "n_regs", None), spills=getattr(k, "n_spills", None),
                 file="triton_row_ptx.txt" if dtype == torch.float32 else None)
        out.append(s)
        log({k2: v for k2, v in s.items() if not k2.endswith("_forms")})
    # Registers and spills at the row kernel's width limit and one step past it (compiled only
    # for this record: the wrapper refuses the wider row).
    for cols in () if smoke else REGISTER_WIDTHS:
        try:
            k = row_kernel_compiled(cols=cols, dtype=torch.float32, rows=1)
            r = {"kind": "registers", "cols": cols, "dtype": "float32", "block_size": cols,
                 "num_warps": num_warps_for(cols),
                 "registers_per_thread": getattr(k, "n_regs", None),
                 "spills": getattr(k, "n_spills", None)}
        except Exception as err:  # noqa: BLE001 - recorded as missing; the rest still runs
            r = {"kind": "registers", "cols": cols, "dtype": "float32",
                 "error": f"{type(err).__name__}: {err}"}
        out.append(r)
        log(r)
    records.write(out_dir / "triton_row_asm.json", out)


def record_bf16_rounding(out_dir: Path, log=print, smoke: bool = False) -> None:
    out = []
    for rows, cols in [(3, 13), (33, 257), (1024, 4096)][:1 if smoke else None]:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(cols, device="cuda", dtype=torch.bfloat16, generator=g)
        exact = reference.rmsnorm(x, w, accum=torch.float32, out_dtype=torch.float32)
        c = bf16_rounding_census(rmsnorm_row(x, w), exact)
        c.update(rows=rows, cols=cols, kernel="triton.row")
        out.append(c)
        log(c)
    records.write(out_dir / "triton_bf16_rounding.json", out,
                  extra={"exact": "reference.rmsnorm in fp32 (torch), before the bf16 cast"})


REPEATS = 3  # independent measurements (each its own graph and copies) per setting


def _repeated_us(call, x, w, nbytes, smoke=False) -> tuple[float, dict, str]:
    """The median of :data:`REPEATS` independent ``time_rotating_us`` measurements, and their
    range (``min_us``, ``max_us``): the spread a difference between settings must beat."""
    import statistics

    runs = [timer.time_rotating_us(call, x, w, nbytes) for _ in range(1 if smoke else REPEATS)]
    times = [us for us, _ in runs]
    spread = {"min_us": round(min(times), 3), "max_us": round(max(times), 3),
              "repeats": len(times), "repeat_medians_us": [round(t, 3) for t in times]}
    return statistics.median(times), spread, f"{runs[0][1]}; median of {len(times)} measurements"


def record_warps(out_dir: Path, log=print, smoke: bool = False) -> None:
    shapes = [(1024, 4096, torch.float32, "seed shape")]
    shapes += [] if smoke else [(4096, c, d, "width sweep") for c in (1024, 2048, 4096, 8192, 16384)
                                for d in (torch.bfloat16, torch.float32)]
    out = []
    for rows, cols, dtype, group in shapes:
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        w = torch.randn(cols, device="cuda", dtype=dtype)
        expected = reference.rmsnorm(x, w, accum=torch.float64)
        nbytes = bytes_moved(rows, cols, dtype)
        line = []
        for nw in (4, 8, 16):
            try:
                ok = checks.allclose(rmsnorm_row(x, w, num_warps=nw), expected).ok
                us, spread, how = _repeated_us(
                    lambda xi, wi: rmsnorm_row(xi, wi, num_warps=nw), x, w, nbytes, smoke)
            except Exception as err:  # noqa: BLE001 - recorded as missing; the others still run
                log(f"{rows}x{cols} {_tag(dtype)} {nw} warps: {type(err).__name__}: {err}")
                continue
            out.append(dict(group=group, rows=rows, cols=cols, dtype=_tag(dtype), num_warps=nw,
                            rule_num_warps=num_warps_for(triton.next_power_of_2(cols)),
                            correct=ok, median_us=round(us, 3), gbps=round(nbytes / us / 1e3, 1),
                            bytes=nbytes, timer=how, **spread))
            line.append(f"{nw} warps {us:.2f} us{'' if ok else ' WRONG'}")
        log(f"{rows}x{cols} {_tag(dtype)}: " + ", ".join(line))
        records.write(out_dir / "triton_warps.json", out)  # complete so far
    if not out:
        raise RuntimeError("no num_warps measurement succeeded")


def record_versions(out_dir: Path, log=print, smoke: bool = False) -> None:
    cases = [(1024, 4096, torch.float32), (65536, 128, torch.bfloat16),
             (16384, 256, torch.bfloat16), (1024, 32768, torch.float32)][:1 if smoke else None]
    out = []
    for rows, cols, dtype in cases:
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        w = torch.randn(cols, device="cuda", dtype=dtype)
        expected = reference.rmsnorm(x, w, accum=torch.float64)
        nbytes = bytes_moved(rows, cols, dtype)
        for name, fn in VERSIONS.values():
            if MAX_COLS[name] is not None and cols > MAX_COLS[name]:
                continue
            try:
                ok = checks.allclose(fn(x, w), expected).ok
                us, spread, how = _repeated_us(fn, x, w, nbytes, smoke)
            except Exception as err:  # noqa: BLE001
                log(f"{name} {rows}x{cols}: {type(err).__name__}: {err}")
                continue
            out.append(dict(variant=name, rows=rows, cols=cols, dtype=_tag(dtype), correct=ok,
                            median_us=round(us, 3), gbps=round(nbytes / us / 1e3, 1), timer=how,
                            **spread))
            log({k: v for k, v in out[-1].items() if k != "timer"})
        records.write(out_dir / "triton_versions.json", out)
    if not out:
        raise RuntimeError("no variant measurement succeeded")


def record(out_dir, tune: bool = False, log=print, smoke: bool = False) -> list[Path]:
    """Chapter 4 on the GPU: each step on its own, so one failure hides nothing else.
    ``smoke``: the first shape of each step only."""
    env.require_gpu("recording chapter 4")
    out_dir = Path(out_dir)
    failed = []
    for name, step in (("assembly", record_assembly), ("bf16 rounding", record_bf16_rounding),
                       ("num_warps sweep", record_warps), ("versions", record_versions)):
        t0 = time.time()
        try:
            step(out_dir, log, smoke)
            log(f"ch04 {name}: ok ({time.time() - t0:.1f} s)")
        except Exception:  # noqa: BLE001 - the other steps still run; the error is in the log
            log(traceback.format_exc())
            failed.append(name)
    if failed:
        raise RuntimeError(f"chapter 4 steps failed: {', '.join(failed)}")
    return [out_dir / f for f in FILES]
