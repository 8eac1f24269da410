"""How far two contracts drift apart through a stack of residual blocks.

One block is what a pre-norm transformer layer does around its sublayer, with the sublayer
replaced by a fixed random linear map::

    y, h = add_rmsnorm_residual(delta, h, w_l)   # h: the residual stream, in bf16 or fp16
    delta = y @ W_l                              # fp32 accumulation, rounded to the dtype

A contract for the fused add runs the first line itself; a plain RMSNorm contract runs after an
eager add, ``h = delta + h`` rounded to the dtype. Both contracts get the same input, weights and
maps; the only difference between the two runs is where each rounds. The same blocks in float64
(no rounding anywhere) give the exact stream each run is measured against too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .. import dtypes as dtype_names, validation
from . import catalog

InputError = validation.InputError
F64 = torch.float64
OPS = ("rmsnorm", "add_rmsnorm_residual")


@dataclass
class Drift:
    """Per dtype, one value per layer (after each block):

    - ``distance``: ``|h_a - h_b| / |h_exact|`` (Frobenius norms over the whole batch);
    - ``differing``: the share of elements of ``h`` whose bits differ between the two runs;
    - ``error_a``, ``error_b``: ``|h_a - h_exact| / |h_exact|``, each run against float64.
    """

    a: str
    b: str
    layers: int
    rows: int
    cols: int
    distance: dict = field(default_factory=dict)
    differing: dict = field(default_factory=dict)
    error_a: dict = field(default_factory=dict)
    error_b: dict = field(default_factory=dict)

    def rows_at(self, layers=None) -> list[dict]:
        """A table: one row per dtype and chosen layer (default: 1, then powers of 2, and the
        last)."""
        if layers is None:
            layers = sorted({1, *(2 ** k for k in range(1, 12) if 2 ** k < self.layers),
                             self.layers})
        out = []
        for d in self.distance:
            for n in layers:
                if 1 <= n <= self.layers:
                    out.append({"dtype": d, "layer": n, "a vs b": self.distance[d][n - 1],
                                "elements differing": self.differing[d][n - 1],
                                f"{self.a} vs exact": self.error_a[d][n - 1],
                                f"{self.b} vs exact": self.error_b[d][n - 1]})
        return out


def _contract(c) -> catalog.Contract:
    contract = catalog.get(c)
    if contract.op not in OPS:
        raise InputError(f"drift runs RMSNorm and fused-add contracts; {contract.name} is "
                         f"{contract.op}")
    return contract


def _block(contract: catalog.Contract, delta, h, w, eps):
    """(y, new h) of one block under ``contract``."""
    if contract.op == "add_rmsnorm_residual":
        y, h = contract.fn(delta, h, w, eps)
        return y, h
    h = (delta.float() + h.float()).to(h.dtype)
    return contract.fn(h, w, eps), h


def _exact_block(delta, h, w, eps):
    h = delta + h
    r = torch.rsqrt((h * h).mean(dim=-1, keepdim=True) + eps)
    return h * r * w, h


def _norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t.to(F64)))


def _whole(value, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return value


def drift(a, b, layers: int = 32, dtypes=("bf16", "fp16"), rows: int = 64, cols: int = 256,
          eps: float = 1e-6, seed: int = 0) -> Drift:
    """Run the same random input through ``layers`` residual blocks under contracts ``a`` and
    ``b`` (names or :class:`~fusedrms.contracts.Contract`, of op ``rmsnorm`` or
    ``add_rmsnorm_residual``), in each of ``dtypes``, on the CPU. Weights ``w_l`` are near 1
    (Gemma's contract reads them as an offset from 1: compare it with itself only); the maps
    ``W_l`` have entries of variance ``1 / cols``."""
    ca, cb = _contract(a), _contract(b)
    layers = _whole(layers, "layers", 1, 4096)
    rows = _whole(rows, "rows", 1, 4096)
    cols = _whole(cols, "cols", 1, 8192)
    eps = validation.check_eps(eps)
    seed = _whole(seed, "seed", 0, 2 ** 63 - 1)
    chosen = [dtype_names.torch_dtype(d) for d in ((dtypes,) if isinstance(dtypes, str) else dtypes)]
    if not chosen or any(d not in (torch.bfloat16, torch.float16) for d in chosen):
        raise InputError(f"dtypes must be bf16 and/or fp16, got {dtypes!r}")
    result = Drift(ca.name, cb.name, layers, rows, cols)
    for dtype in chosen:
        g = torch.Generator().manual_seed(seed)
        h0 = torch.randn(rows, cols, generator=g).to(dtype)
        delta0 = torch.randn(rows, cols, generator=g).to(dtype)
        runs = {"a": (delta0, h0), "b": (delta0, h0), "exact": (delta0.to(F64), h0.to(F64))}
        key = dtype_names.short(dtype)
        for series in (result.distance, result.differing, result.error_a, result.error_b):
            series[key] = []
        for _ in range(layers):
            w = (1.0 + 0.1 * torch.randn(cols, generator=g)).to(dtype)
            linear = torch.randn(cols, cols, generator=g) / math.sqrt(cols)
            for run, contract in (("a", ca), ("b", cb)):
                y, h = _block(contract, *runs[run], w, eps)
                runs[run] = ((y.float() @ linear).to(dtype), h)
            y, h = _exact_block(*runs["exact"], w.to(F64), eps)
            runs["exact"] = (y @ linear.to(F64), h)
            exact = _norm(runs["exact"][1])
            ha, hb = runs["a"][1], runs["b"][1]
            result.distance[key].append(_norm(ha.to(F64) - hb.to(F64)) / exact)
            result.differing[key].append(float((ha != hb).double().mean()))
            result.error_a[key].append(_norm(ha.to(F64) - runs["exact"][1]) / exact)
            result.error_b[key].append(_norm(hb.to(F64) - runs["exact"][1]) / exact)
    return result
