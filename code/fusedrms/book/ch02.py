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
