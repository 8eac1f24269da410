"""Chapter 9's backward kernels: gradcheck in float64, the formula in every dtype, determinism of
the two-stage dw, autograd plumbing, and clear errors for bad inputs."""
import pytest
import torch

from fusedrms import checks, env, reference, verify
from fusedrms.book import broken_backward
from fusedrms.kernels import rmsnorm_backward as B
from fusedrms.validation import InputError

DEVICE = env.current().device
F64 = torch.float64


def _inputs(rows, cols, dtype=torch.float32, seed=0, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    x, res, w, dy, ds = (torch.randn(*s, generator=g) for s in
                         ((rows, cols), (rows, cols), (cols,), (rows, cols), (rows, cols)))
    return [t.to(dtype).to(device) for t in (x, res, w, dy, ds)]


def _gradchecks(device):
    x, res, w, _, _ = _inputs(3, 7, F64, seed=1, device=device)
    for mode in B.DW_MODES:
        args = [t.clone().requires_grad_() for t in (x, w)]
        assert torch.autograd.gradcheck(lambda a, b: B.rmsnorm(a, b, 1e-5, mode), args)
        args = [t.clone().requires_grad_() for t in (x, res, w)]
        # both outputs (y and s = x + residual) carry a gradient: the residual path is checked
        assert torch.autograd.gradcheck(lambda a, r, b: B.add_rmsnorm(a, r, b, 1e-5, mode), args)


def test_gradcheck_float64():
    _gradchecks(DEVICE)


@pytest.mark.gpu
def test_gradcheck_float64_on_gpu():
    _gradchecks(torch.device("cuda"))
    x, _, w, _, _ = _inputs(300, 257, F64, seed=2, device="cuda")  # many programs, padded lanes
    args = [t.clone().requires_grad_() for t in (x, w)]
    assert torch.autograd.gradcheck(lambda a, b: B.rmsnorm(a, b), args, fast_mode=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(5, 13), (9, 257), (2, 4096)])
@pytest.mark.parametrize("mode", B.DW_MODES)
def test_gradients_match_the_float64_formula(dtype, shape, mode):
    x, res, w, dy, ds = _inputs(*shape, dtype)
    ref = reference.rmsnorm_backward(x, w, dy, accum=F64)
    dx, dw = B.backward(x, w, dy, dw_mode=mode)
    assert checks.allclose(dx, ref["dx"], scale=ref["dx_scale"])
    assert checks.allclose(dw, ref["dw"], n=shape[0], scale=ref["dw_scale"])
    s = x.to(F64) + res.to(F64)
    ref = reference.rmsnorm_backward(s, w, dy, accum=F64, d_sum=ds)
    dx, dw = B.backward(x, w, dy, residual=res, d_sum=ds, dw_mode=mode)
    assert checks.allclose(dx, ref["dx"], scale=ref["dx_scale"])
    assert checks.allclose(dw, ref["dw"], n=shape[0], scale=ref["dw_scale"])


def test_formula_is_what_autograd_computes():
    x, _, w, dy, _ = _inputs(4, 9, F64)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    gx, gw = torch.autograd.grad(reference.rmsnorm(xg, wg, accum=F64), (xg, wg), dy)
    ref = reference.rmsnorm_backward(x, w, dy, accum=F64)
    torch.testing.assert_close(ref["dx"], gx, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(ref["dw"], gw, rtol=1e-12, atol=1e-14)


def test_saved_r_and_recomputed_r_agree():
    x, _, w, dy, _ = _inputs(6, 33)
    _, _, rstd = B.forward(x, w)
    torch.testing.assert_close(rstd.double(), reference.row_scale(x, 1e-5, F64).flatten())
    a = B.backward(x, w, dy, rstd=rstd)
    b = B.backward(x, w, dy)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-6, atol=1e-7)


def _loss_backward(module_or_fn, x, w):
    x = x.clone().requires_grad_()
    w = w.clone().requires_grad_()
    y = module_or_fn(x, w)
    (y.float() ** 2).sum().backward()
    return x.grad, w.grad


def test_loss_backward_works_through_the_module_and_matches_eager_autograd():
    x, res, w, _, _ = _inputs(2 * 3, 64)
    x3 = x.reshape(2, 3, 64)  # leading dimensions are flattened and restored
    layer = B.RMSNorm(64)
    with torch.no_grad():
        layer.weight.copy_(w)
    xg = x3.clone().requires_grad_()
    (layer(xg) ** 2).sum().backward()
    gx, gw = _loss_backward(lambda a, b: reference.rmsnorm(a, b), x3, w)
    assert xg.grad.shape == x3.shape
    torch.testing.assert_close(xg.grad, gx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(layer.weight.grad, gw, rtol=1e-4, atol=1e-5)


def test_fused_add_gives_x_and_residual_the_same_gradient_including_the_residual_path():
    x, res, w, _, _ = _inputs(5, 40)
    xs = [t.clone().requires_grad_() for t in (x, res, w)]
    y, s = B.add_rmsnorm(*xs)
    (y.sum() + (s * s).sum()).backward()  # s feeds the next layer too
    ref = [t.clone().requires_grad_() for t in (x, res, w)]
    s_ref = ref[0] + ref[1]
    y_ref = reference.rmsnorm(s_ref, ref[2])
    (y_ref.sum() + (s_ref * s_ref).sum()).backward()
    for got, want in zip(xs, ref):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)
    assert torch.equal(xs[0].grad, xs[1].grad)


def test_two_stage_dw_is_bitwise_identical_across_runs():
    x, _, w, dy, _ = _inputs(64, 257)
    first = B.backward(x, w, dy)[1]
    for _ in range(3):
        assert checks.equal(B.backward(x, w, dy)[1], first)


@pytest.mark.gpu
def test_two_stage_dw_is_bitwise_identical_on_gpu_and_atomics_are_close():
    x, _, w, dy, _ = _inputs(16384, 4096, torch.bfloat16, device="cuda")
    runs = [B.backward(x, w, dy)[1] for _ in range(5)]
    assert all(checks.equal(r, runs[0]) for r in runs)
    ref = reference.rmsnorm_backward(x, w, dy, accum=F64)
    atomic = B.backward(x, w, dy, dw_mode="atomic")[1]
    assert checks.allclose(atomic, ref["dw"], n=16384, scale=ref["dw_scale"])


def test_programs_override_changes_partials_but_not_the_answer():
    x, _, w, dy, _ = _inputs(10, 20)
    ref = reference.rmsnorm_backward(x, w, dy, accum=F64)
    for programs in (1, 3, 10, 50):
        dx, dw = B.backward(x, w, dy, programs=programs)
        assert checks.allclose(dw, ref["dw"], n=10, scale=ref["dw_scale"]), programs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, F64])
@pytest.mark.parametrize("programs", [1, 3, 7])
def test_prefetching_the_next_tile_changes_no_bit(dtype, programs):
    # 7 rows over 1, 3 (3 + 3 + 1) or 7 programs: the last row of a range, and one-row ranges,
    # are where a prefetch could read past its rows
    x, res, w, dy, ds = _inputs(7, 300, dtype, seed=5)
    for kwargs in ({}, {"residual": res, "d_sum": ds}, {"rstd": B.forward(x, w)[2]}):
        before = B.backward(x, w, dy, programs=programs, prefetch=False, **kwargs)
        after = B.backward(x, w, dy, programs=programs, **kwargs)
        assert all(torch.equal(a, b) for a, b in zip(before, after)), kwargs


@pytest.mark.gpu
def test_prefetching_the_next_tile_changes_no_bit_on_gpu():
    x, res, w, dy, ds = _inputs(1000, 4096, torch.bfloat16, seed=6)
    for programs in (None, 999):
        before = B.backward(x, w, dy, programs=programs, prefetch=False, residual=res, d_sum=ds)
        after = B.backward(x, w, dy, programs=programs, residual=res, d_sum=ds)
        assert all(torch.equal(a, b) for a, b in zip(before, after)), programs


@pytest.mark.parametrize("cols, dtype", [(8192, torch.float32), (16384, torch.bfloat16)])
def test_a_wide_row_reloads_w_and_gives_the_formula(cols, dtype):
    # a wide row (w reloaded each step, not prefetched by default) over 1 to 3 programs
    assert B.wide_row(1, cols, dtype)
    x, res, w, dy, ds = _inputs(5, cols - 3, dtype, seed=9)
    s = x.to(F64) + res.to(F64)
    ref = reference.rmsnorm_backward(s, w, dy, 1e-5, accum=F64, d_sum=ds)
    for programs in (1, 3):
        got = B.backward(x, w, dy, residual=res, d_sum=ds, programs=programs)
        assert checks.allclose(got[0], ref["dx"], scale=ref["dx_scale"]), programs
        assert checks.allclose(got[1], ref["dw"], n=5, scale=ref["dw_scale"]), programs
        prefetched = B.backward(x, w, dy, residual=res, d_sum=ds, programs=programs, prefetch=True)
        assert all(torch.equal(a, b) for a, b in zip(got, prefetched)), programs


@pytest.mark.parametrize("cols, dtype, prefetch", [(16384 - 3, torch.bfloat16, None),
                                                    (300, torch.float32, None),
                                                    (300, torch.bfloat16, False)])
def test_the_order_of_the_dw_update_changes_no_bit(cols, dtype, prefetch):
    # DW_FIRST only reorders statements: dw first (the rule at 16384 columns) and last give the
    # same bits, with and without the residual's gradient, over one row per program and several
    x, res, w, dy, ds = _inputs(5, cols, dtype, seed=11)
    for kwargs in ({}, {"residual": res, "d_sum": ds}):
        for programs in (1, 5):
            runs = [B.backward(x, w, dy, programs=programs, prefetch=prefetch, dw_first=first,
                               **kwargs) for first in (False, True)]
            assert all(torch.equal(a, b) for a, b in zip(*runs)), (kwargs.keys(), programs)


def test_the_loop_order_is_a_switch_named_in_its_refusal():
    x, _, w, dy, _ = _inputs(3, 64)
    with pytest.raises(InputError, match="dw_first must be True or False"):
        B.backward(x, w, dy, dw_first="last")
    assert B.launch_options(1, 16384, torch.bfloat16, dw_first=False)["DW_FIRST"] is False
    assert B.launch_options(4, 2048, torch.bfloat16, dw_first=True)["DW_FIRST"] is True


@pytest.mark.gpu
def test_the_order_of_the_dw_update_changes_no_bit_on_gpu():
    for rows, cols, dtype in ((300, 16384, torch.bfloat16), (300, 16384, torch.float32),
                              (1000, 4096, torch.bfloat16)):
        x, res, w, dy, ds = _inputs(rows, cols, dtype, seed=12)
        runs = [B.backward(x, w, dy, residual=res, d_sum=ds, dw_first=first)
                for first in (False, True)]
        assert all(torch.equal(a, b) for a, b in zip(*runs)), (rows, cols, dtype)


@pytest.mark.gpu
def test_a_wide_row_gives_the_formula_on_gpu():
    for cols, dtype in ((16384, torch.bfloat16), (16384, torch.float32), (8192, torch.float32)):
        x, _, w, dy, ds = _inputs(300, cols, dtype, seed=10)
        ref = reference.rmsnorm_backward(x, w, dy, 1e-5, accum=F64, d_sum=ds)
        got = B.backward(x, w, dy, d_sum=ds, rstd=B.forward(x, w)[2])
        assert checks.allclose(got[0], ref["dx"], scale=ref["dx_scale"]), (cols, dtype)
        assert checks.allclose(got[1], ref["dw"], n=300, scale=ref["dw_scale"]), (cols, dtype)


def test_empty_rows():
    x, _, w, dy, _ = _inputs(1, 8)
    dx, dw = B.backward(x[:0], w, dy[:0])
    assert dx.shape == (0, 8) and torch.equal(dw, torch.zeros_like(w))


def test_non_contiguous_gradient():
    x, _, w, dy, _ = _inputs(6, 16)
    dy_t = dy.t().contiguous().t()
    ref = reference.rmsnorm_backward(x, w, dy, accum=F64)
    dx, dw = B.backward(x, w, dy_t)
    assert checks.allclose(dx, ref["dx"], scale=ref["dx_scale"])


@pytest.mark.parametrize("call,match", [
    (lambda x, w, dy: B.backward(x, w, dy[:, :3]), "dy has shape"),
    (lambda x, w, dy: B.backward(x, w, dy.double()), "dy is float64"),
    (lambda x, w, dy: B.backward(x, w[:3], dy), "one weight per column"),
    (lambda x, w, dy: B.backward(x, w, dy, dw_mode="fast"), "dw_mode"),
    (lambda x, w, dy: B.backward(x, w, dy, programs=0), "programs"),
    (lambda x, w, dy: B.backward(x, w, dy, rstd=torch.ones(2)), "rstd"),
    (lambda x, w, dy: B.backward(x.int(), w, dy), "dtype int32"),
    (lambda x, w, dy: B.backward(x, w, dy, eps=-1), "eps"),
    (lambda x, w, dy: B.backward(x, w, dy, residual=x[:2]), "residual has shape"),
    (lambda x, w, dy: B.rmsnorm(x, w, 1e-5, "fast"), "dw_mode"),
])
def test_bad_inputs_get_a_clear_message(call, match):
    x, _, w, dy, _ = _inputs(4, 8)
    with pytest.raises(InputError, match=match):
        call(x, w, dy)


def test_too_wide_rows_are_refused_with_the_limit():
    x = torch.zeros(1, B.MAX_COLS + 1, device=DEVICE)
    with pytest.raises(InputError, match=str(B.MAX_COLS)):
        B.backward(x, torch.ones(B.MAX_COLS + 1, device=DEVICE), x)


SMALL_CASES = [verify.case(n) for n in ("3x13", "33x257", "all zeros", "NaN input", "Inf input",
                                        "strided rows", "huge values")]


@pytest.mark.parametrize("name", ["bwd.two_stage", "bwd.atomic", "bwd.add_two_stage",
                                  "bwd.add_atomic", "bwd.forward", "bwd.add_forward"])
def test_registered_kernels_pass_the_boundary_suite(name):
    results = verify.run(verify.lookup(name), cases=SMALL_CASES)
    failed = [f"{r.dtype} {r.case}: {r.message}" for r in results if r.status == "FAIL"]
    assert not failed, failed


@pytest.mark.parametrize("name", broken_backward.CAUGHT)
def test_every_broken_backward_is_caught(name):
    results = verify.run(verify.lookup(name), dtypes=[torch.float32], cases=SMALL_CASES)
    assert any(r.status == "FAIL" for r in results), f"{name} passed every check"


@pytest.mark.gpu
def test_suite_on_gpu():
    """GPU shapes (1024 x 4096 among them), fp32 and bf16; every case runs in the verify CLI."""
    cases = SMALL_CASES + [verify.case("1024x4096"), verify.case("overflow")]
    results = verify.run(verify.lookup("bwd.*"), dtypes=[torch.float32, torch.bfloat16],
                         cases=cases)
    failed = [f"{r.kernel} {r.dtype} {r.case}: {r.message}" for r in results if r.status == "FAIL"]
    assert not failed, failed
    for name in broken_backward.CAUGHT:
        bad = verify.run(verify.lookup(name), dtypes=[torch.float32], cases=SMALL_CASES)
        assert any(r.status == "FAIL" for r in bad), name


def test_grid_rule():
    # rows per step: a tile of about 16 KiB of one tensor, 1 to 4 rows
    assert B.tile_rows_for(2048, torch.bfloat16) == 4
    assert B.tile_rows_for(4096, torch.bfloat16) == 2
    assert B.tile_rows_for(8192, torch.bfloat16) == 1
    assert B.tile_rows_for(4096, torch.float32) == 1
    assert B.tile_rows_for(64, torch.float32) == B.MAX_TILE_ROWS
    # warps: one per KiB of tile, 4 to 16, at most 8 over several rows
    assert B.warps_for(4, 2048, torch.bfloat16) == 8
    assert B.warps_for(1, 8192, torch.bfloat16) == 16
    assert B.warps_for(1, 16384, torch.float32) == 32  # a wide row: one warp per 2 KiB
    assert B.warps_for(1, 16384, torch.bfloat16) == 16
    assert B.warps_for(1, 8192, torch.float32) == 16
    # a wide row: one row of more than 16 KiB of one tensor
    assert B.wide_row(1, 16384, torch.bfloat16) and B.wide_row(1, 8192, torch.float32)
    assert not B.wide_row(1, 8192, torch.bfloat16) and not B.wide_row(1, 4096, torch.float32)
    assert not B.wide_row(2, 4096, torch.bfloat16)
    # the launch's options: a wide row unprefetched (unless asked) with w reloaded; dw first only
    # at 16384 columns and without the prefetch
    assert B.launch_options(1, 16384, torch.bfloat16) == dict(PREFETCH=False, W_RELOAD=True,
                                                              DW_FIRST=True, num_warps=16)
    assert B.launch_options(1, 8192, torch.float32) == dict(PREFETCH=False, W_RELOAD=True,
                                                            DW_FIRST=False, num_warps=16)
    prefetched = B.launch_options(1, 16384, torch.float32, prefetch=True)
    assert prefetched["PREFETCH"] and not prefetched["DW_FIRST"]
    assert B.launch_options(4, 2048, torch.bfloat16) == dict(PREFETCH=True, W_RELOAD=False,
                                                             DW_FIRST=False, num_warps=8)
    assert B.warps_for(4, 64, torch.float32) == 4
    # programs per SM: 32 KiB of x and dy tiles in flight per SM
    assert B.programs_per_sm(2048, torch.bfloat16) == 1
    assert B.programs_per_sm(1024, torch.bfloat16) == 2
    assert B.programs_per_sm(256, torch.float32) == 4
    assert B.programs_per_sm(8192, torch.bfloat16) == 1
    assert B.programs_per_sm(65536, torch.float32) == 1
    cpu = torch.device("cpu")
    assert B.programs_for(3, 64, torch.float32, cpu) == 3  # never more programs than rows
    assert B.programs_for(100, 64, torch.float32, cpu) == B.INTERPRETER_PROGRAMS
    assert B.programs_for(0, 64, torch.float32, cpu) == 0


def test_grid_rule_on_a_gpu_sized_machine(monkeypatch):
    monkeypatch.setattr(B, "sm_count", lambda device: 132)
    gpu = torch.device("cuda")
    assert B.programs_for(16384, 2048, torch.bfloat16, gpu) == 132
    assert B.programs_for(16384, 1024, torch.bfloat16, gpu) == 132 * 2
    assert B.programs_for(1024, 256, torch.float32, gpu) == 132  # at least one per SM
    assert B.programs_for(16384, 8192, torch.bfloat16, gpu) == 132
    assert B.programs_for(16384, 4096, torch.bfloat16, gpu, per_sm=8) == 132 * 8


@pytest.mark.parametrize("tile_rows", [1, 2, 4, 8])
@pytest.mark.parametrize("programs", [1, 2, 3])
def test_every_tile_of_rows_gives_the_formula(tile_rows, programs):
    # 7 rows: every program's last tile is partly masked off; eps = 0 and r recomputed, so a
    # masked-off row (all zeros) has r = NaN and must still add nothing to dw
    x, res, w, dy, ds = _inputs(7, 33, torch.float32, seed=8)
    ref = reference.rmsnorm_backward(x, w, dy, 0.0, accum=F64)
    for mode in B.DW_MODES:
        dx, dw = B.backward(x, w, dy, 0.0, programs=programs, tile_rows=tile_rows, dw_mode=mode)
        assert checks.allclose(dx, ref["dx"], scale=ref["dx_scale"]), (mode, "dx")
        assert checks.allclose(dw, ref["dw"], n=7, scale=ref["dw_scale"]), (mode, "dw")
    s = x.to(F64) + res.to(F64)
    ref = reference.rmsnorm_backward(s, w, dy, 0.0, accum=F64, d_sum=ds)
    dx, dw = B.backward(x, w, dy, 0.0, residual=res, d_sum=ds, programs=programs,
                        tile_rows=tile_rows)
    assert checks.allclose(dx, ref["dx"], scale=ref["dx_scale"])
    assert checks.allclose(dw, ref["dw"], n=7, scale=ref["dw_scale"])


@pytest.mark.parametrize("tile_rows", [0, 3, 16, 2.0, True, "4"])
def test_a_bad_tile_of_rows_is_named(tile_rows):
    x, _, w, dy, _ = _inputs(4, 8)
    with pytest.raises(InputError, match="tile_rows"):
        B.backward(x, w, dy, tile_rows=tile_rows)


@pytest.mark.parametrize("tile_rows, cols, dtype, most", [
    (8, 2048, torch.bfloat16, 4), (4, 4096, torch.bfloat16, 2), (2, 8192, torch.bfloat16, 1),
    (4, 2048, torch.float32, 2), (2, 4096, torch.float32, 1)])
def test_a_tile_of_rows_too_large_for_registers_is_refused(tile_rows, cols, dtype, most):
    # each of these tiles overflows the registers on sm_90 (it spills, or one program of 8 warps
    # fills an SM); the largest tile that does not is accepted
    x, _, w, dy, _ = _inputs(4, cols, dtype)
    with pytest.raises(InputError, match=f"tile_rows <= {most} here"):
        B.backward(x, w, dy, tile_rows=tile_rows)
    dx, dw = B.backward(x, w, dy, tile_rows=most)
    ref = reference.rmsnorm_backward(x, w, dy, 1e-5, accum=F64)
    assert checks.allclose(dx, ref["dx"], scale=ref["dx_scale"])


def test_a_gradient_of_the_gradient_raises_instead_of_being_dropped():
    """Issue 26: create_graph=True returned a gradient with no graph (a gradient penalty silently
    lost its own gradient)."""
    from fusedrms.kernels import rmsnorm_backward as B

    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        torch.autograd.grad(B.rmsnorm(x, w).sum(), x, create_graph=True)
    r = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    y, s = B.add_rmsnorm(x, r, w)
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        torch.autograd.grad((y.sum(), s.sum()), (x, r), create_graph=True)
    (gx,) = torch.autograd.grad(B.rmsnorm(x, w).sum(), x)  # a plain backward still works
    assert gx.shape == x.shape


def test_float64_rows_with_a_bf16_weight_get_the_right_dw():
    """Issue 26: float64 partials stored into a bf16 pointer gave dw = 0, 9e-41 or NaN."""
    from fusedrms.kernels import rmsnorm_backward as B

    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    w = torch.ones(4, dtype=torch.bfloat16)
    dy = torch.ones(1, 4, dtype=torch.float64)
    _, dw = B.backward(x, w, dy, dw_mode="two_stage")
    expected = (x / x.pow(2).mean().add(1e-5).sqrt()).squeeze(0)
    assert dw.dtype == torch.bfloat16
    torch.testing.assert_close(dw.double(), expected, rtol=1e-2, atol=0)


@pytest.mark.parametrize("cols,match", [(-1, "got -1"), ("4", "got '4'"), (True, "got True"),
                                        (0, "got 0"), (4.0, "got 4.0")])
def test_the_module_refuses_a_width_that_is_not_a_whole_number(cols, match):
    """Issue 26: RMSNorm(-1) and RMSNorm("4") ended in tracebacks from torch.ones."""
    with pytest.raises(InputError, match=f"cols .* whole number >= 1, {match}"):
        B.RMSNorm(cols)
    with pytest.raises(InputError, match="dtype must be one of"):
        B.RMSNorm(4, dtype=torch.int32)
    assert B.RMSNorm(torch.tensor(4).item()).weight.shape == (4,)


def test_a_none_residual_is_refused_not_dropped():
    """Issue 26: add_rmsnorm(x, None, w) returned (y, None), the add silently skipped."""
    x, _, w, dy, _ = _inputs(3, 8)
    for call in (lambda: B.add_rmsnorm(x, None, w),
                 lambda: B.add_rmsnorm(x.clone().requires_grad_(), None, w),
                 lambda: B.add_rmsnorm_residual_forward(x, None, w),
                 lambda: B.add_rmsnorm_backward(x, None, w, dy),
                 lambda: B.add_rmsnorm_backward_atomic(x, None, w, dy)):
        with pytest.raises(InputError, match="residual is None.*rmsnorm\\(x, w\\)"):
            call()
    assert B.RMSNorm(8)(x).shape == x.shape  # the module's residual=None means no add


def test_sparse_inputs_are_refused_naming_the_argument():
    x, res, w, _, _ = _inputs(3, 8)
    with pytest.raises(InputError, match="x is a sparse_coo tensor"):
        B.rmsnorm(x.to_sparse(), w)
    with pytest.raises(InputError, match="residual is a sparse_coo tensor"):
        B.add_rmsnorm(x, res.to_sparse(), w)


@pytest.mark.parametrize("mode", B.DW_MODES)
def test_bf16_subnormals_are_read_exactly_forward_and_backward(mode):
    """Issue 26: on the CPU route bf16 values below 1.18e-38 were read up to 8x off (dw 2.59e-21
    for 2.14e-20)."""
    bf16 = torch.bfloat16
    x = torch.tensor([[4e-19, 3e-39, -1.5e-39, 9.2e-41], [1e-39, -2e-39, 5e-40, 1e-38]],
                     dtype=bf16, device=DEVICE)
    w = torch.tensor([1.0, 2.0, 0.5, 1.0], dtype=bf16, device=DEVICE)
    dy = torch.tensor([[1.0, -1.0, 2.0, 1.0], [0.5, 1.0, 1.0, -1.0]], dtype=bf16, device=DEVICE)
    y = B.rmsnorm_forward(x, w, 1e-5)
    assert checks.allclose(y, reference.rmsnorm(x, w, 1e-5, accum=F64))
    dx, dw = B.backward(x, w, dy, 1e-5, dw_mode=mode)
    ref = reference.rmsnorm_backward(x, w, dy, 1e-5, accum=F64)
    assert checks.allclose(dx, ref["dx"], scale=ref["dx_scale"])
    assert checks.allclose(dw, ref["dw"], n=2, scale=ref["dw_scale"])
    s = torch.tensor([[0.0, 1e-39, 0.0, 9.2e-41], [2e-39, 0.0, -5e-40, 0.0]], dtype=bf16,
                     device=DEVICE)
    y, total = B.add_rmsnorm_residual_forward(x, s, w, 1e-5)
    assert checks.equal(total, (x.double() + s.double()).to(bf16))


def test_the_kernels_outside_autograd_refuse_inputs_that_require_grad():
    """Issue 26: forward() and backward() called directly returned tensors with no grad_fn, so a
    loss built on them lost its gradient; the autograd entry points still record."""
    x, res, w, dy, ds = _inputs(3, 8)
    xg = x.clone().requires_grad_()
    forward_calls = (lambda: B.forward(xg, w), lambda: B.rmsnorm_forward(xg, w),
                     lambda: B.add_rmsnorm_residual_forward(xg, res, w))
    for call in forward_calls:
        with pytest.raises(InputError, match="x requires grad, but rmsnorm_backward.forward is "
                                             "forward only.*rmsnorm_backward.rmsnorm"):
            call()
    backward_calls = (lambda: B.backward(xg, w, dy), lambda: B.rmsnorm_backward(xg, w, dy),
                      lambda: B.rmsnorm_backward_atomic(xg, w, dy),
                      lambda: B.add_rmsnorm_backward(xg, res, w, dy, d_sum=ds),
                      lambda: B.add_rmsnorm_backward_atomic(xg, res, w, dy))
    for call in backward_calls:
        with pytest.raises(InputError, match="x requires grad, but rmsnorm_backward.backward is "
                                             "a backward that is not itself differentiable"):
            call()
    with pytest.raises(InputError, match="dy requires grad"):
        B.backward(x, w, dy.clone().requires_grad_())
    with torch.no_grad():
        assert torch.equal(B.rmsnorm_forward(xg, w), B.rmsnorm_forward(x, w))
    y = B.rmsnorm(xg, w)  # the autograd entry point records
    assert y.grad_fn is not None
    y.sum().backward()
    assert xg.grad is not None and xg.grad.shape == x.shape
