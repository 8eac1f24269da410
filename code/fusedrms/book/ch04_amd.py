"""Chapter 4's registers on AMD: the row kernel compiled for RDNA4 and CDNA3 (no AMD GPU needed,
:mod:`fusedrms.kernels.amd_targets`) beside the registers recorded on the NVIDIA GPU, as a narrow
table, and the values the page's fixed sentences beside it show.
"""
from __future__ import annotations

from ..kernels import amd_targets
from ..kernels.rmsnorm import ROW_MAX_COLS, num_warps_for

# fp32 columns: the compiler section's width, the row kernel's limit, one step past it
WIDTHS = (4096, ROW_MAX_COLS, 2 * ROW_MAX_COLS)
TARGETS = amd_targets.DEFAULT_TARGETS


def launches() -> list:
    return [amd_targets.row_launch(cols, "float32") for cols in WIDTHS]


def compile_row_kernel(targets=TARGETS) -> list:
    """The row kernel at :data:`WIDTHS` compiled for each AMD target (a few seconds)."""
    return amd_targets.compile_launches(launches(), targets)


def nvidia_counts(*record_lists) -> dict:
    """``{cols: (registers, spills)}`` of the fp32 row kernel from recorded files (chapter 2's
    register records, chapter 4's assembly summary); the first list that has a width wins."""
    out = {}
    for recs in record_lists:
        for r in recs or []:
            try:
                if r.get("dtype", "float32") != "float32" or r.get("registers_per_thread") is None:
                    continue
                counts = (int(r["registers_per_thread"]), int(r["spills"] or 0))
                out.setdefault(int(r["cols"]), counts)
            except (AttributeError, KeyError, TypeError, ValueError):
                continue
    return out


def nvidia_name(provenance: dict | None) -> str:
    gpu = (provenance or {}).get("gpu") or "NVIDIA"
    return gpu.removeprefix("NVIDIA ").strip() or "NVIDIA"


def _registers(count: int, spills: int) -> str:
    return f"{count}, {spills} spilled" if spills else str(count)


def table(nvidia: dict, nvidia_gpu: str, results, targets=TARGETS) -> list[dict]:
    """One row per width: registers per thread (NVIDIA, recorded) and VGPRs per lane (AMD,
    compiled), ``", N spilled"`` where values went to memory."""
    by_key = amd_targets.compiled_by_key(results)
    rows = []
    for cols in WIDTHS:
        nv = nvidia.get(cols)
        row = {"fp32 columns": f"{cols:,}",
               nvidia_gpu: _registers(*nv) if nv else "not recorded"}
        for arch in targets:
            r = by_key.get((amd_targets.row_launch(cols).key, arch))
            ok = r is not None and r.compiled
            row[amd_targets.TARGETS[arch].short] = (_registers(r.vgprs, r.spills) if ok
                                                    else "did not compile")
        rows.append(row)
    return rows


def lane_values(targets=TARGETS) -> dict[str, str]:
    """What the page says beside the table, as values: each target's name and VGPRs per lane, and
    at the widest row how many values a thread holds on a 64-lane target and on a 32-lane GPU
    (arithmetic on the rule and the targets, the same whatever was compiled here)."""
    cols = WIDTHS[-1]
    warps = num_warps_for(cols)
    chosen = [amd_targets.TARGETS[a] for a in targets]
    narrow = next(t for t in chosen if t.wavefront == 32)
    wide = next(t for t in chosen if t.wavefront == 64)
    return {"amd_cols": f"{cols:,}", "amd_narrow": narrow.short,
            "amd_narrow_vgprs": str(narrow.max_vgprs), "amd_wide": wide.short,
            "amd_wide_vgprs": str(wide.max_vgprs),
            "amd_values": str(cols // (warps * wide.wavefront)),
            "nv_values": str(cols // (warps * 32))}
