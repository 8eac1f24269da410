"""``python -m fusedrms.verify --jobs N``: the suite's implementations as parts for N processes
(compilation is CPU-bound, so parts compile side by side), run and timed, their checks put back in
the order one process gives."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from . import dtypes as _dtypes, registry

_NAMED = (torch.float32, torch.float16, torch.bfloat16)

SLOW_FIRST = ("torch.compile", "bwd.", "hip.")  # the longest groups start first (H200 logs)
# Implementations that compile a new kernel for each dtype (torch.compile per shape and dtype, the
# backward's Triton kernels per dtype and width, the capstone's per dtype and launch; the capstone's
# parts were the suite's longest on the H200, 106 s at 06f3124): with --jobs their dtypes run side
# by side.
SPLIT_BY_DTYPE = ("torch.compile", "bwd.", "capstone.")


def route_groups(impls: list[registry.Impl]) -> list[list[str]]:
    """Implementation names in groups for ``--jobs``: the HIP routes together (they share one
    build), every other implementation alone, the slowest to compile first."""
    groups: dict[str, list[str]] = {}
    for impl in impls:
        key = "hip" if impl.name.startswith("hip.") else impl.name
        groups.setdefault(key, []).append(impl.name)

    def rank(names):
        return next((i for i, p in enumerate(SLOW_FIRST) if names[0].startswith(p)), len(SLOW_FIRST))
    return sorted(groups.values(), key=rank)


def _dtype_name(dtype: torch.dtype) -> str:
    """A dtype as the suite's checks record it (``fp32``, ..., ``torch.float64``)."""
    return _dtypes.short(dtype) if dtype in _NAMED else str(dtype)


@dataclass(frozen=True)
class Part:
    """One worker's task under ``--jobs``: a group of :func:`route_groups`, all of its dtypes
    (``dtypes`` None: those asked for) or, for :data:`SPLIT_BY_DTYPE`, one of them."""

    names: tuple[str, ...]
    dtypes: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        names = self.names[0] if len(self.names) == 1 else f"{self.names[0].split('.')[0]}.*"
        return names + (f" {','.join(self.dtypes)}" if self.dtypes else "")


def route_parts(impls: list[registry.Impl], jobs: int, dtypes=None) -> list[Part]:
    """:func:`route_groups` as tasks for ``jobs`` processes. With ``jobs > 1`` each implementation
    of :data:`SPLIT_BY_DTYPE` becomes one part per dtype (each compiles its own kernels, so they
    compile in parallel). Longest first: the estimated cost is the part's (implementation,
    dtype) pairs, each a compilation (the HIP group counts one: one shared build); ties keep
    :data:`SLOW_FIRST`. ``dtypes``: the dtypes asked for (None: every dtype)."""
    by_name = {i.name: i for i in impls}
    wanted = None if dtypes is None else set(dtypes)

    def labels(impl):
        return [_dtype_name(d) for d in impl.dtypes if wanted is None or d in wanted]

    parts = []
    for group in route_groups(impls):
        impl = by_name[group[0]]
        if jobs > 1 and len(group) == 1 and group[0].startswith(SPLIT_BY_DTYPE) \
                and len(labels(impl)) > 1:
            parts.extend(Part((group[0],), (d,)) for d in labels(impl))
        else:
            parts.append(Part(tuple(group)))

    def cost(part):
        if part.names[0].startswith("hip."):
            return 1
        return sum(len(part.dtypes or labels(by_name[n])) for n in part.names)
    return sorted(parts, key=cost, reverse=True)  # stable: route_groups' order among equals


def group_times(times: list[tuple[Part, float, float, bool]], top: int = 8) -> str:
    """The parts' wall times, longest first (``top`` of them), one line each: the suite's
    critical path, for the end of the output (a log that keeps only its tail keeps them)."""
    lines = [f"longest parts ({min(top, len(times))} of {len(times)}; the part's wall time, when "
             f"it finished):"]
    longest = sorted(times, key=lambda t: -t[1] if t[1] == t[1] else float("inf"))  # NaN: crashed
    for part, wall, done, first in longest[:top]:
        lines.append(f"  {wall:6.1f} s  done at +{done:5.1f} s  {part.label}"
                     + ("  (first in its process)" if first else ""))
    return "\n".join(lines)


def run_in_processes(parts: list[Part], jobs: int, worker, worker_args, on_crash, collect,
                     progress, start=None) -> list:
    """Runs ``worker(*worker_args(part))`` for every part in ``jobs`` spawned processes (``worker``
    returns its checks, its wall seconds and whether it was its process's first part; a part whose
    worker raised gets ``on_crash(part, error)``). Returns ``(part, wall s, done at +s, first in its
    process)`` per part."""
    import concurrent.futures
    import multiprocessing

    start = time.perf_counter() if start is None else start
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=min(jobs, len(parts)), mp_context=multiprocessing.get_context("spawn"))
    times = []
    with pool:
        futures = {pool.submit(worker, *worker_args(part)): part for part in parts}
        for future in concurrent.futures.as_completed(futures):
            part = futures[future]
            wall, first = float("nan"), False
            try:
                group_results, wall, first = future.result()
            except Exception as e:  # a crashed worker: its kernels fail, the others still report
                group_results = on_crash(part, e)
            times.append((part, wall, time.perf_counter() - start, first))
            for check in group_results:
                progress(check)
            collect(group_results, part, wall)
    return times
