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
ESTIMATE_S = 10  # H200 at b6cfbb0: 3 s
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
# the roofline's points: the three designs, and plain RMSNorm fused and unfused
ROOFLINE_STEPS = (BASELINE_STEP, "fused_add_rmsnorm", "fused_add_rmsnorm_residual", "rmsnorm",
                  "rmsnorm_unfused")
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


# ---------------------------------------------------------------- names for the page

EAGER_KERNEL_NAMES = {"add": "residual add", "rmsnorm": "normalization",  # model kernel -> words
                      "scale": "weight multiply", "fused_add_rmsnorm": "one kernel",
                      "fused_add_rmsnorm_residual": "one kernel"}
