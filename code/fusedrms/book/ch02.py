"""Chapter 2's companion: the GPU recording of the traffic model's two measured inputs.

``record(out_dir)`` writes ``traffic_bandwidth.json`` (the measured copy bandwidth next to the
published table, and the model's ideal times for the chapter's shapes at both) and
``traffic_row_registers.json`` (registers and spills of chapter 4's row kernel by width, fp32:
where "the row stays in registers" stops being true).
"""
from __future__ import annotations

from pathlib import Path

import torch

from .. import env, records, traffic
from ..kernels.rmsnorm import num_warps_for
from .ch04 import row_kernel_compiled

FILES = {
    "traffic_bandwidth.json": "measured copy bandwidth vs the published table; ideal times",
    "traffic_row_registers.json": "registers and spills of the row kernel by width (fp32)",
}
ESTIMATE_S = 30
SOURCES = ("traffic.py", "measure/timer.py", "kernels/rmsnorm.py", "book/ch02.py::record")
SHAPES = (("eager_add_rmsnorm", 4096, 4096), ("fused_add_rmsnorm", 4096, 4096),
          ("fused_add_rmsnorm_residual", 4096, 4096), ("rmsnorm", 4096, 4096),
          ("rmsnorm_fp8_naive", 2, 7168), ("rmsnorm_fp8_fused", 2, 7168))
REGISTER_WIDTHS = (4096, 8192, 16384, 32768, 65536)


def record_bandwidth(out_dir: Path, log=print) -> Path:
    e = env.current()
    bw, source = traffic.reader_bandwidth_GBps()
    log(f"copy bandwidth: {bw:.0f} GB/s ({source}) on {e.gpu_name}")
    key = traffic.published_for(e.gpu_name)
    published = traffic.PUBLISHED[key][0] if key else None
    recs = [{"kind": "bandwidth", "gpu": e.gpu_name, "measured_GBps": bw, "source": source,
             "published_key": key, "published_GBps": published,
             "fraction_of_published": bw / published if published else None}]
    for step, rows, cols in SHAPES:
        at_measured = traffic.price(step, rows, cols, "bf16", bw)
        at_published = traffic.price(step, rows, cols, "bf16", published) if published else None
        recs.append({"kind": "ideal", "step": step, "rows": rows, "cols": cols, "dtype": "bf16",
                     "bytes_total": at_measured.bytes_total,
                     "ideal_us_measured_bw": at_measured.ideal_us,
                     "ideal_us_published_bw": at_published.ideal_us if at_published else None})
    path = records.write(out_dir / "traffic_bandwidth.json", recs,
                         extra={"published_table": {k: list(v) for k, v in traffic.PUBLISHED.items()}})
    if source != "measured":
        raise RuntimeError("the copy bandwidth was not measured (see the message above)")
    return path


def record_row_registers(out_dir: Path, log=print, widths=REGISTER_WIDTHS) -> Path:
    recs = []
    for cols in widths:
        try:
            block = 1 << (cols - 1).bit_length()
            warps = num_warps_for(block)
            k = row_kernel_compiled(cols=cols, dtype=torch.float32, rows=2)
            r = {"cols": cols, "dtype": "float32", "block_size": block, "num_warps": warps,
                 "values_per_thread": block // (32 * warps),
                 "registers_per_thread": getattr(k, "n_regs", None),
                 "spills": getattr(k, "n_spills", None)}
        except Exception as e:  # noqa: BLE001 - record the failure, keep the other widths
            r = {"cols": cols, "dtype": "float32", "error": f"{type(e).__name__}: {e}"[:300]}
        recs.append(r)
        log(r)
    return records.write(out_dir / "traffic_row_registers.json", recs)


def record(out_dir, tune: bool = False, log=print, smoke: bool = False) -> list[Path]:
    """``smoke``: one width (the same code paths, seconds instead of a minute)."""
    env.require_gpu("recording chapter 2")
    out_dir = Path(out_dir)
    registers = record_row_registers(out_dir, log, REGISTER_WIDTHS[:1] if smoke else REGISTER_WIDTHS)
    return [record_bandwidth(out_dir, log), registers]


# ---------------------------------------------------------------- readers for the page

# What a reader writes, F.rms_norm(x + r, (cols,), w): the baseline every measured claim of the
# chapter is against. The chain that applies the weight in a separate multiply is an illustration.
BASELINE, BASELINE_STEP = "torch.rms_norm_add", "torch_add_rmsnorm"
CHAIN = "torch.eager_chain"
FUSED = ("capstone.fused", "capstone.fused_residual")
CENSUS_DESIGNS = {  # census implementation -> the model's step for it
    BASELINE: BASELINE_STEP,
    "capstone.fused": "fused_add_rmsnorm",
    "capstone.fused_residual": "fused_add_rmsnorm_residual",
    CHAIN: "eager_add_rmsnorm",
}
# a profiled kernel's name -> the eager step's kernel it is (PyTorch's kernel names)
_EAGER_ROLES = (("add", "add"), ("layer_norm", "rmsnorm"), ("rms_norm", "rmsnorm"),
                ("mul", "scale"))


def ceilings(floor: records.CopyFloor) -> dict:
    """A roofline's two ceilings for the recorded GPU: the measured copy ``floor`` and the fp32
    peak of the GPU's data sheet, with the table's name for it (``"H200 SXM"``). A GPU the
    published table lacks has no peak: the committed recording's GPU stands in."""
    key = traffic.published_for(floor.gpu)
    if key is None:
        floor = records.copy_floor(records.COMMITTED)
        key = traffic.published_for(floor.gpu)
    return {"gpu": key, "bandwidth_GBps": floor.GBps,
            "bandwidth_source": f"{key.split()[0]} copy, measured",
            "peak_tflops": traffic.PUBLISHED[key][1], "peak_source": traffic.PUBLISHED[key][2]}


def calculator_ceilings(floor: records.CopyFloor) -> dict:
    """What the calculator starts from: on a GPU, its copy measured on the spot and its data
    sheet's fp32 peak (:func:`fusedrms.traffic.reader_ceilings`); without one, :func:`ceilings`
    of the recorded ``floor``."""
    return traffic.reader_ceilings() if env.current().on_gpu else ceilings(floor)


def _eager_role(kernel_name: str) -> str | None:
    lowered = kernel_name.lower()
    return next((role for key, role in _EAGER_ROLES if key in lowered), None)


def kernel_times(extra_doc: dict, floor: records.CopyFloor) -> list[dict]:
    """Each profiled kernel of PyTorch's designs and of the fused kernels (chapter 7's kernel
    census), next to its bytes in the traffic model and their copy ``floor``: design, kernel,
    name (the profiler's), row_trips, measured_us, floor_us, pct_of_copy.

    A census whose kernels do not match the model's (another PyTorch splitting a design
    differently) raises ValueError naming them."""
    out = []
    for rec in extra_doc["records"]:
        step = CENSUS_DESIGNS.get(rec.get("impl"))
        if rec.get("kind") != "kernel_census" or step is None or "kernels" not in rec:
            continue
        est = traffic.price(step, rec["rows"], rec["cols"], rec["dtype"])
        unit = rec["rows"] * rec["cols"] * traffic.DTYPE_BYTES[est.dtype]
        model = {k.name: k for k in est.kernels}
        for k in rec["kernels"]:
            name = est.kernels[0].name if len(est.kernels) == 1 else _eager_role(k["name"])
            if name not in model:
                raise ValueError(f"{rec['impl']}: profiled kernel {k['name'][:60]!r} is none "
                                 f"of the model's kernels {sorted(model)}")
            cost = model[name]
            out.append({"design": rec["impl"], "kernel": name, "name": k["name"], "rows": rec["rows"],
                        "cols": rec["cols"], "dtype": est.dtype,
                        "row_trips": cost.bytes_total / unit,
                        "count_per_call": k["count_per_call"],
                        "measured_us": k["device_us_per_call"],
                        "floor_us": floor.us(cost.bytes_total),
                        "pct_of_copy": floor.pct(cost.bytes_total * k["count_per_call"],
                                                 k["device_us_per_call"])})
    order = {s: i for i, s in enumerate(CENSUS_DESIGNS)}
    kernel_order = {"add": 0, "rmsnorm": 1, "scale": 2}
    return sorted(out, key=lambda r: (order[r["design"]], kernel_order.get(r["kernel"], 0)))


def design_totals(times: list[dict]) -> dict:
    """{design: {"measured_us", "floor_us", "pct_of_copy", "kernels"}} summed over its kernels."""
    out: dict = {}
    for r in times:
        d = out.setdefault(r["design"], {"measured_us": 0.0, "floor_us": 0.0, "kernels": 0})
        d["measured_us"] += r["measured_us"]
        d["floor_us"] += r["floor_us"] * r["count_per_call"]
        d["kernels"] += r["count_per_call"]
    for d in out.values():
        d["pct_of_copy"] = 100 * d["floor_us"] / d["measured_us"]
    return out


def grid_pair(grid_doc: dict, slow: str, fast: str, rows: int, cols: int, dtype: str,
              mode: str = "cold") -> dict | None:
    """Median and process range of ``slow`` and ``fast`` at one shape of the benchmark grid
    (chapter 6's harness), or None when the grid lacks either."""
    found = {}
    for r in grid_doc["records"]:
        if (r.get("impl") in (slow, fast) and r.get("status") == "ok" and r.get("rows") == rows
                and r.get("cols") == cols and r.get("dtype") == dtype and r.get("mode") == mode
                and r.get("median_us")):
            found.setdefault(r["impl"], r)
    if len(found) < 2:
        return None
    return {name: {"median_us": r["median_us"], "min_us": r["min_median_us"],
                   "max_us": r["max_median_us"], "processes": r.get("processes")}
            for name, r in found.items()}


def best_pct_of_floor(grid_doc: dict, floor: records.CopyFloor,
                      mode: str = "cold") -> float | None:
    """The highest % of its copy ``floor`` any correct, timed record of the grid reaches, with
    the L2 cache flushed before every call (``mode``: a warm L2 would pass the floor from
    cache)."""
    pcts = [r["pct_of_floor"] for r in floor.reprice(grid_doc)["records"]
            if r.get("status") == "ok" and r.get("pct_of_floor") and r.get("correct", True)
            and r.get("mode", mode) == mode]
    return max(pcts) if pcts else None


# ---------------------------------------------------------------- sentences for the page
# The measured answers in words that stay true and read well whatever the recording holds.

NOT_RECORDED = "not recorded yet (chapter {}'s GPU recording measures it)"
EAGER_KERNEL_NAMES = {"add": "residual add", "rmsnorm": "normalization",  # model kernel -> words
                      "scale": "weight multiply", "fused_add_rmsnorm": "one kernel",
                      "fused_add_rmsnorm_residual": "one kernel"}


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


def copy_sentence(floor: records.CopyFloor | None, best_pct_of_floor: float | None = None) -> str:
    """The measured copy rate (the book's one ``floor``) against the data sheet (when the GPU is
    in the published table), and how far past its copy floor the fastest kernel of chapter 6's
    grid went."""
    if not floor:
        return "The copy bandwidth is " + NOT_RECORDED.format(2) + "."
    text = ("A large device-to-device copy, which reads and writes its data once, reached "
            f"{floor.GBps:,.0f} GB/s")
    if floor.published_GBps:
        text += (f", {_pct(floor.GBps / floor.published_GBps)} of the data "
                 f"sheet's {floor.published_GBps:,.0f} GB/s")
    else:
        text += " (this GPU is not in the published table)"
    text += (". That rate, not the data sheet's, is the reference for the rest of the book: a "
             "design's copy floor is its bytes at the copy's rate. It is a reference, not a hard "
             "limit")
    if best_pct_of_floor is None:
        return text + "."
    if best_pct_of_floor > 100:
        return text + (f": the best kernel of chapter 6's grid passes it, at "
                       f"{best_pct_of_floor:.0f}% of its copy floor's rate.")
    return text + (f", although no kernel of chapter 6's grid passes it here: the best runs at "
                   f"{best_pct_of_floor:.0f}% of its copy floor's rate.")


DESIGN_WORDS = {BASELINE: "PyTorch's two kernels", CHAIN: "the three-kernel chain",
                "capstone.fused": "the fused kernel"}


def grid_sentence(pair: dict | None, slow: str = BASELINE, fast: str = "capstone.fused") -> str:
    """Chapter 6's harness on the same two designs: medians, process ranges, their ratio."""
    if not pair:
        return ("Chapter 6's harness times the same two designs another way; its grid at this "
                "shape is " + NOT_RECORDED.format(6) + ".")
    e, f = pair[slow], pair[fast]
    processes = f.get("processes")
    how = (f"repeating the measurement in {processes} processes" if processes and processes > 1
           else "in one process")
    apart = e["min_us"] > f["max_us"] or f["min_us"] > e["max_us"]

    def spread(d):
        return (f"{d['min_us']:.1f} to {d['max_us']:.1f}" if f"{d['min_us']:.1f}" !=
                f"{d['max_us']:.1f}" else f"all {d['median_us']:.1f}")

    return (f"Chapter 6's harness times the same two designs another way, flushing the L2 cache "
            f"before every call and {how}: {DESIGN_WORDS.get(slow, slow)} take a median "
            f"{e['median_us']:.1f} µs (the processes' medians: {spread(e)}) and "
            f"{DESIGN_WORDS.get(fast, fast)} {f['median_us']:.1f} µs ({spread(f)}), "
            f"{e['median_us'] / f['median_us']:.2f}× apart, with ranges that "
            f"{'do not overlap' if apart else 'overlap'}.")


def fusion_outlook(totals: dict, bounds: tuple) -> str:
    """The chapter's closing recap of its measurement, a clause: whether PyTorch's two kernels
    lost more or less than their bytes against the two fused kernels (``bounds``: two
    Fractions)."""
    need = (BASELINE, *FUSED)
    if any(n not in totals for n in need):
        return "its measurement on a real GPU is " + NOT_RECORDED.format(7)
    base, fused, resid = (totals[n]["measured_us"] for n in need)
    above = [base / fused > float(bounds[0]), base / resid > float(bounds[1])]
    if all(above):
        return "the measurement says that PyTorch's two kernels lose more than their bytes"
    if not any(above):
        return "the measurement says that fusion bought less than the bytes promise"
    return ("the measurement says that fusion bought more than the bytes promise against one "
            "fused kernel and less against the other")


def fusion_answer(totals: dict, census: list[dict], bounds: tuple, gpu: str) -> str:
    """The chapter's answer: PyTorch's two kernels and the fused kernels, measured; what fusion
    bought against each, and why that is above or below the byte ratios ``bounds`` (two
    Fractions, the baseline's row-trips over each fused kernel's)."""
    need = (BASELINE, *FUSED)
    if not census or any(n not in totals for n in need):
        return "The kernel census is " + NOT_RECORDED.format(7) + "."
    base, fused, resid = (totals[n] for n in need)
    first = next(r for r in census if r["design"] == BASELINE)
    plain_x = base["measured_us"] / fused["measured_us"]
    fair_x = base["measured_us"] / resid["measured_us"]
    ratios = [f"{b.numerator}/{b.denominator}" for b in bounds]
    above = [plain_x > float(bounds[0]), fair_x > float(bounds[1])]
    slowest = min((r for r in census if r["design"] == BASELINE), key=lambda r: r["pct_of_copy"])
    rates = (f"The fused kernels run at {fused['pct_of_copy']:.0f}% and "
             f"{resid['pct_of_copy']:.0f}% of the copy rate, PyTorch's two kernels together at "
             f"{base['pct_of_copy']:.0f}% (its "
             f"{EAGER_KERNEL_NAMES.get(slowest['kernel'], slowest['kernel'])} at "
             f"{slowest['pct_of_copy']:.0f}%).")
    byte_ratios = f"the byte ratios of {ratios[0]} and {ratios[1]}"
    if all(above):
        why = f"That is more than {byte_ratios}, because the fused kernels move their bytes faster."
    elif not any(above):
        why = f"That is less than {byte_ratios}, because PyTorch's kernels move their bytes faster."
    else:
        why = f"That is above one of {byte_ratios} and below the other."
    return (f"On the {gpu} at {first['rows']} x {first['cols']} {first['dtype']}, PyTorch's two "
            f"kernels take {base['measured_us']:.1f} µs, the fused kernel "
            f"{fused['measured_us']:.1f} µs and the residual-writing one "
            f"{resid['measured_us']:.1f} µs. The fused kernel is {plain_x:.2f}× faster and the "
            f"residual-writing one {fair_x:.2f}×. {why} {rates}")


def chain_sentence(totals: dict, census: list[dict]) -> str:
    """The three-kernel chain as an illustration: what its separate weight multiply costs next to
    the add, which moves more bytes, and which kind of PyTorch kernel each one ran."""
    rows = {r["kernel"]: r for r in census if r["design"] == CHAIN}
    if CHAIN not in totals or not {"add", "scale"} <= set(rows):
        return "The three-kernel chain is " + NOT_RECORDED.format(7) + "."
    add, scale = rows["add"], rows["scale"]
    more = add["row_trips"] / scale["row_trips"] - 1
    text = (f"Applying the weight in a separate multiply makes a three-kernel chain of "
            f"{totals[CHAIN]['measured_us']:.1f} µs. Its multiply alone takes "
            f"{scale['measured_us']:.1f} µs, at {scale['pct_of_copy']:.0f}% of the copy rate, "
            f"while the add, which moves {100 * more:.0f}% more bytes, takes "
            f"{add['measured_us']:.1f} µs.")
    vector = ["vectorized" in r.get("name", "") for r in (add, scale)]
    if vector == [True, False]:
        text += (" The profiler names the reason: the add ran in PyTorch's vectorized "
                 "elementwise kernel, the multiply in its non-vectorized one.")
    return text + " Bytes bound a design; a kernel that moves its bytes slowly loses more."
