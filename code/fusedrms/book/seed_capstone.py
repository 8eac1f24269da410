"""The seed capstone listing, kept as the object of critique in chapter 7. Do not use it.

This is the one place the book shows the seed document's fused add + RMSNorm as printed (renamed
``seed_*`` so nobody imports it by mistake). It has two faults, which chapter 7 runs and explains:

1. **It does not launch on current Triton.** The launcher passes ``BLOCK=`` while every
   ``@triton.autotune`` config also sets ``BLOCK``; Triton refuses with
   ``ValueError: Conflicting meta-parameters: BLOCK`` (:func:`launch_as_printed` records it).
2. **If the autotuner were allowed to pick BLOCK, it would normalize part of a row.** A program
   loads ``BLOCK`` columns and never loops, so with BLOCK 512/1024/2048 below the width the columns
   past BLOCK are never written, and the mean of squares sums only the first BLOCK columns but
   divides by the full width, so even the written columns are scaled wrongly
   (:func:`launch_with_block` shows it, :func:`partial_normalization_error` measures it).

The fix lives in :mod:`fusedrms.kernels.add_rmsnorm`: BLOCK follows from the width and is never tuned;
what is tuned (warps, rows per program, stages) is keyed on the width and the dtype.
"""
from __future__ import annotations

from .. import env  # noqa: F401  (interpreter switch before @triton.jit)

import torch
import triton
import triton.language as tl

# [book:seed-listing]
@triton.autotune(
    configs=[
        triton.Config({'BLOCK': 512}, num_warps=4),
        triton.Config({'BLOCK': 1024}, num_warps=4),
        triton.Config({'BLOCK': 2048}, num_warps=8),
    ],
    key=['n_cols'],
)
@triton.jit
def seed_fused_add_rmsnorm(x_ptr, r_ptr, w_ptr, y_ptr,
                           n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols

    x = tl.load(x_ptr + row * n_cols + offs, mask=mask,
                other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * n_cols + offs, mask=mask,
                other=0.0).to(tl.float32)
    t = x + r

    var = tl.sum(t * t, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)

    w = tl.load(w_ptr + offs, mask=mask).to(tl.float32)
    tl.store(y_ptr + row * n_cols + offs, t * rstd * w, mask=mask)


def seed_add_rmsnorm(x, residual, w, eps=1e-6):
    y = torch.empty_like(x)
    n_rows, n_cols = x.shape
    seed_fused_add_rmsnorm[(n_rows,)](x, residual, w, y, n_cols, eps,
        BLOCK=triton.next_power_of_2(n_cols))
    return y
# [/book:seed-listing]


SEED_BLOCKS = (512, 1024, 2048)  # the BLOCK values in the listing's autotune configs


def launch_as_printed(x, residual, w, eps: float = 1e-6) -> dict:
    """Call the listing exactly as printed; return what happened (it is expected to raise)."""
    try:
        seed_add_rmsnorm(x, residual, w, eps)
    except Exception as e:  # noqa: BLE001  (the failure is the result we record)
        return {"launched": False, "error_type": type(e).__name__, "error": str(e)}
    return {"launched": True, "error_type": None, "error": None}


def launch_with_block(x, residual, w, block: int, eps: float = 1e-6) -> torch.Tensor:
    """Run the listing's kernel body with one of its autotune BLOCKs, as if the autotuner chose it.

    The output starts as NaN so columns the kernel never writes stay visible.
    """
    n_rows, n_cols = x.shape
    y = torch.full_like(x, float("nan"))
    kernel = seed_fused_add_rmsnorm.fn  # the @triton.jit function under the autotuner
    kernel[(n_rows,)](x, residual, w, y, n_cols, eps, BLOCK=block, num_warps=4)
    return y


def partial_normalization_error(x, residual, w, block: int, eps: float = 1e-6) -> dict:
    """How wrong the listing is when BLOCK < width: unwritten columns and error in the written ones."""
    from .. import reference

    y = launch_with_block(x, residual, w, block, eps).float().cpu()
    expected = reference.add_rmsnorm(x, residual, w, eps, accum=torch.float64).double().cpu()
    cols = x.shape[1]
    written = ~torch.isnan(y)
    cols_written = int(written[0].sum())
    head = slice(0, min(block, cols))
    rel = ((y[:, head].double() - expected[:, head]).abs()
           / expected[:, head].abs().clamp_min(1e-30))
    return {"block": block, "cols": cols, "rows": x.shape[0],
            "cols_written_per_row": cols_written,
            "fraction_written": cols_written / cols,
            "median_rel_err_written": float(rel.median()),
            "max_rel_err_written": float(rel.max())}
