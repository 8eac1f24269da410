"""Inputs for the tests of the designs that split a row over programs (split, exchange)."""
import torch

from fusedrms import env

DEV = env.current().device


def inputs(rows, cols, dtype, seed=0, stride=None):
    """x, r (rows of ``stride`` columns, ``cols`` of them used) and a weight near 1, on the
    book's device."""
    g = torch.Generator().manual_seed(seed)
    width = stride or cols
    x = torch.randn(rows, width, generator=g).to(dtype).to(DEV)[:, :cols]
    r = torch.randn(rows, width, generator=g).to(dtype).to(DEV)[:, :cols]
    w = (torch.rand(cols, generator=g) + 0.5).to(dtype).to(DEV)
    return x, r, w


def assert_both_ops_and_in_place_match(x, r, w, cfg):
    """Both capstone ops under ``cfg`` against the float64 references (the stored residual bit for
    bit), and in place the same bits as out of place."""
    from fusedrms import checks, reference
    from fusedrms.kernels import add_rmsnorm as A

    y = A.add_rmsnorm(x, r, w, 1e-5, config=cfg)
    assert checks.allclose(y, reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64)).ok
    y2, s2 = A.add_rmsnorm_residual(x, r, w, 1e-5, config=cfg)
    y_ref, s_ref = reference.add_rmsnorm_residual(x, r, w, 1e-5, accum=torch.float64)
    assert torch.equal(s2, s_ref.to(x.dtype))
    assert checks.allclose(y2, y_ref).ok
    xi, ri = x.clone(), r.clone()
    A.add_rmsnorm_residual(xi, ri, w, 1e-5, in_place=True, config=cfg)
    assert torch.equal(ri, s2) and torch.equal(xi, y2)  # s is read back from residual's memory
