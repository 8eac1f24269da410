"""Chapter 4's registers on AMD: the row kernel compiled for RDNA4 and CDNA3 (no AMD GPU needed,
:mod:`fusedrms.kernels.amd_targets`) beside the registers recorded on the NVIDIA GPU, as a narrow
table and two sentences that read right whatever was recorded or compiled.
"""
from __future__ import annotations

from ..kernels import amd_targets
from ..kernels.rmsnorm import ROW_MAX_COLS, num_warps_for
from . import page

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


def answer(nvidia: dict, nvidia_gpu: str, results, targets=TARGETS) -> str:
    """Two sentences: what the widest row does on each AMD target, and why the 64-lane one holds
    fewer values per thread."""
    cols = WIDTHS[-1]
    by_key = amd_targets.compiled_by_key(results)
    got = [(amd_targets.TARGETS[a], by_key.get((amd_targets.row_launch(cols).key, a)))
           for a in targets]
    if not got or any(r is None or not r.compiled for _, r in got):
        return ("The AMD compile did not run here, so the AMD columns are empty "
                "(`python -m fusedrms.kernels.amd_targets` says why).")
    nv = nvidia.get(cols)
    lead = (f"At {cols:,} columns, where the {nvidia_gpu} spilled "
            f"{page.counted(nv[1], 'value')} per thread, " if nv and nv[1]
            else f"At {cols:,} columns ")
    spilling = [(t, r) for t, r in got if r.spills]
    if not spilling:
        first = lead + ("neither" if len(got) == 2 else "no") + " AMD target spills: "
        first += page.listed([f"the {t.short} takes {r.vgprs} of a lane's {t.max_vgprs} VGPRs"
                              if i == 0 else f"the {t.short} {r.vgprs}"
                              for i, (t, r) in enumerate(got)]) + "."
    else:
        first = lead + page.listed([f"the {t.short} spills {page.counted(r.spills, 'value')}"
                                    for t, r in spilling]) + "."
    warps = num_warps_for(cols)
    wide = [t for t, _ in got if t.wavefront == 64]
    if not wide:
        return first
    t = wide[0]
    threads = warps * t.wavefront
    second = (f" On the {t.short} Triton's {warps} warps are {warps} wavefronts of {t.wavefront} "
              f"lanes, {threads:,} threads, so each holds {cols // threads} values where a "
              f"32-lane GPU's thread holds {cols // (warps * 32)}.")
    return first + second
