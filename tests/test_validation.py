import pytest
import torch

from fusedrms import validation as v


def test_as_rows_flattens_leading_dims_and_keeps_views():
    x = torch.randn(2, 3, 8)
    rows = v.as_rows(x)
    assert rows.shape == (6, 8) and rows.data_ptr() == x.data_ptr()
    assert v.as_rows(torch.randn(8)).shape == (1, 8)


def test_as_rows_makes_strided_columns_contiguous():
    x = torch.randn(8, 6).t()  # column stride 6
    rows = v.as_rows(x)
    assert rows.stride(-1) == 1 and torch.equal(rows, x)


def test_as_rows_keeps_a_padded_row_stride():
    base = torch.randn(4, 16)
    x = base[:, :13]  # row stride 16, unit column stride: kernels can use it as is
    rows = v.as_rows(x)
    assert rows.data_ptr() == base.data_ptr() and rows.stride() == (16, 1)


@pytest.mark.parametrize("bad,match", [
    ([1.0, 2.0], "must be a torch.Tensor"),
    (torch.ones(3, dtype=torch.int32), "dtype int32"),
    (torch.tensor(1.0), "scalar"),
    (torch.ones(3, 0), "zero columns"),
    (torch.eye(3).to_sparse(), r"sparse_coo tensor.*x.to_dense\(\)"),  # issue 26: a traceback
])
def test_bad_inputs_say_what_to_do(bad, match):
    with pytest.raises(v.InputError, match=match):
        v.as_rows(bad)


def test_weight_checks():
    dev = torch.device("cpu")
    with pytest.raises(v.InputError, match=r"expected shape \(8,\)"):
        v.check_weight(torch.ones(7), 8, dev)
    with pytest.raises(v.InputError, match="one weight per column"):
        v.check_weight(torch.ones(2, 4), 8, dev)
    assert v.check_weight(torch.ones(16)[::2], 8, dev).is_contiguous()
    with pytest.raises(v.InputError, match="w is a sparse_coo tensor"):
        v.check_weight(torch.ones(8).to_sparse(), 8, dev)


def test_forward_only_refuses_inputs_that_require_grad_while_autograd_records():
    x, w = torch.ones(2, 4), torch.nn.Parameter(torch.ones(4))
    v.check_forward_only({"x": x, "w": w.detach()}, "triton.row")
    with pytest.raises(v.InputError, match="w requires grad, but triton.row is forward only.*"
                                           "rmsnorm_backward.rmsnorm.*torch.no_grad"):
        v.check_forward_only({"x": x, "w": w}, "triton.row")
    with torch.no_grad():
        v.check_forward_only({"x": x, "w": w}, "triton.row")
    with torch.inference_mode():
        v.check_forward_only({"x": x.requires_grad_(), "w": w}, "triton.row")
    with pytest.raises(v.InputError, match="x requires grad, but bwd is a backward, not "
                                           "differentiable: its output would have no gradient"):
        v.check_forward_only({"x": x, "dy": None}, "bwd", role="a backward, not differentiable")


def test_same_shape_dtype_device():
    x = torch.ones(2, 4)
    with pytest.raises(v.InputError, match="shape"):
        v.check_same(x, torch.ones(2, 5), "x", "residual")
    with pytest.raises(v.InputError, match="float16"):
        v.check_same(x, torch.ones(2, 4, dtype=torch.float16), "x", "residual")


def test_device_width_and_eps():
    with pytest.raises(v.InputError, match=".cuda()"):
        v.check_device(torch.ones(1), torch.device("cuda"))
    with pytest.raises(v.InputError, match="at most 8 columns.*looped"):
        v.check_width(9, 8, "row kernel", "the looped kernel")
    assert v.check_eps(1e-5) == 1e-5
    for bad in (-1.0, float("nan"), float("inf"), "x"):
        with pytest.raises(v.InputError):
            v.check_eps(bad)


# ---------------------------------------------------------------- issue 17: eps, flags, overlap

@pytest.mark.parametrize("eps,match", [
    (10 ** 400, "does not fit a float"), (True, "must be a number"), ("1e-5", "must be a number"),
    (None, "must be a number"), (torch.tensor(1e-5), "must be a number"), (-1e-5, ">= 0"),
    (float("nan"), ">= 0"), (float("inf"), ">= 0"), (1e300, "largest"), (1e-40, "smallest normal"),
])
def test_check_eps_refuses_what_the_kernels_cannot_use(eps, match):
    with pytest.raises(v.InputError, match=match):
        v.check_eps(eps)


@pytest.mark.parametrize("bad, match", [(float("nan"), "finite number >= 0, got nan"),
                                        (float("inf"), "got inf"), (-1e-9, "got -1e-09"),
                                        (10**400, "got inf"), ("1e-3", "a number such as"),
                                        (None, "a number such as"), (False, "a number such as")])
def test_check_tolerance_refuses_what_would_fix_the_verdict(bad, match):
    with pytest.raises(v.InputError, match=f"^my_tol must be .*{match}"):
        v.check_tolerance(bad, "my_tol")


def test_check_tolerance_accepts_zero_and_finite_numbers():
    assert v.check_tolerance(0, "rtol") == 0.0 and v.check_tolerance(1e-6, "rtol") == 1e-6
    assert isinstance(v.check_tolerance(2, "atol"), float)


def test_check_eps_accepts_zero_and_fp32_normal_numbers():
    assert v.check_eps(0) == 0.0 and v.check_eps(1e-6) == 1e-6
    assert v.check_eps(v.FP32_TINY) == v.FP32_TINY and v.check_eps(v.FP32_MAX) == v.FP32_MAX
    import numpy

    assert v.check_eps(numpy.float32(1e-5)) == pytest.approx(1e-5)


@pytest.mark.parametrize("floor,match", [
    ("1e-4", "^absmax_floor must be a number such as 1e-4, got '1e-4'"),
    (True, "^absmax_floor must be a number .* got True"), (None, "must be a number"),
    (torch.tensor(1e-4), "must be a number"), (1e-40, "^absmax_floor=1e-40 is below fp32's"),
    (1e39, "^absmax_floor=1e\\+39 is beyond fp32's largest"), (10 ** 400, "does not fit a float"),
    (-1e-4, "finite number >= 0"), (float("nan"), "got nan"), (float("inf"), "got inf"),
])
def test_check_absmax_floor_names_the_argument(floor, match):
    """Issue 26: "1e-4", True, fp32 subnormals and 1e39 (infinite scales, every code 0) passed."""
    with pytest.raises(v.InputError, match=match):
        v.check_absmax_floor(floor)


def test_check_absmax_floor_accepts_zero_and_fp32_normal_numbers():
    assert v.check_absmax_floor(0) == 0.0 and v.check_absmax_floor(1e-4) == 1e-4
    assert v.check_absmax_floor(v.FP32_TINY) == v.FP32_TINY
    assert v.check_absmax_floor(v.FP32_MAX) == v.FP32_MAX


def test_the_eps_error_stays_short_for_huge_integers():
    with pytest.raises(v.InputError) as e:
        v.check_eps(10 ** 400)
    assert len(str(e.value)) < 120


@pytest.mark.parametrize("bad", ["no", 1, None, 0.0])
def test_check_flag_takes_only_booleans(bad):
    with pytest.raises(v.InputError, match="True or False"):
        v.check_flag(bad, "in_place")
    assert v.check_flag(False, "in_place") is False


def test_check_tensor_names_the_supported_dtype():
    with pytest.raises(v.InputError, match=r"x.to\(torch.bfloat16\)\."):
        v.check_tensor(torch.ones(2), "x", dtypes=(torch.bfloat16,))


def test_overlap_is_found_by_byte_range_not_by_pointer():
    buf = torch.randn(10, 13)
    a, b = buf[:9], buf[1:]
    assert v.overlaps(a, b) and v.overlaps(buf[0], buf) and v.overlaps(buf[:, 3], buf[:, 5])
    assert not v.overlaps(buf[:5], buf[5:]) and not v.overlaps(buf, torch.randn(10, 13))
    assert not v.overlaps(buf[:0], buf)  # no elements, no memory


def test_check_no_overlap_lets_an_output_replace_its_own_input_only():
    x, r, w = torch.randn(4, 8), torch.randn(4, 8), torch.randn(8)
    v.check_no_overlap({"x": x, "residual": r}, {"x": x, "residual": r, "w": w})
    with pytest.raises(v.InputError, match="x is written but shares memory with w"):
        v.check_no_overlap({"x": x}, {"x": x, "w": x[0]})
    with pytest.raises(v.InputError, match="both written"):
        v.check_no_overlap({"x": x, "residual": x}, {})
    with pytest.raises(v.InputError, match="shares memory with x"):
        v.check_no_overlap({"x": x[:, :4]}, {"x": x})  # the same name, a different view


# ---------------------------------------------------------------- the policy holds on every route

from fusedrms import checks, env, reference, registry  # noqa: E402

ENV = env.current()


def _policy_rows(dtype, device):
    """Row 0 overflows the fp32 sum of squares, row 1 is ordinary, row 2 holds an Inf, row 3 is
    tiny (mean square below fp32's normal range)."""
    cols = 257
    g = torch.Generator().manual_seed(17)
    x = torch.randn(4, cols, generator=g)
    x[0] = 1e19 * x[0].sign()
    x[2, 7] = float("inf")
    x[3] = 1e-21 * x[3]
    w = torch.rand(cols, generator=g) + 0.5
    return x.to(dtype).to(device), w.to(dtype).to(device)


def _run(impl, x, w, eps):
    if impl.op in registry.BACKWARD_OPS:  # chapter 9: dx for dy = 1 (dw mixes the rows)
        dy = torch.ones_like(x)
        args = (x, w, dy, eps) if impl.op == "rmsnorm_backward" else (
            x, torch.zeros_like(x), w, dy, eps)
        return impl.fn(*args)[0]
    if impl.op in ("add_rmsnorm", "add_rmsnorm_residual"):
        # an in-place kernel writes y over x: give it a copy so x stays the reference's input
        out = impl.fn(x.clone() if impl.mutates else x, torch.zeros_like(x), w, eps)
        return out[0] if impl.op == "add_rmsnorm_residual" else out
    return impl.fn(x, w, eps)


def _kernels(device_key, names=None):
    return [i for i in registry.impls() if i.kernel and device_key in i.devices
            and i.op not in registry.BACKWARD_OPS and (names is None or i.name in names)]


def check_policy_on_every_route(device, names=None):
    """Every kernel: the overflowed and Inf rows are NaN whatever eps; the tiny row is computed
    with eps > 0 and NaN with eps = 0; the ordinary row matches the float64 reference."""
    import numpy

    key = "cpu" if device.type == "cpu" else "cuda"
    seen = []
    for impl in _kernels(key, names):
        for dtype in (torch.float32, torch.bfloat16):
            if dtype not in impl.dtypes:
                continue
            x, w = _policy_rows(dtype, device)
            for eps in (1e-5, 0.0):
                with numpy.errstate(all="ignore"):
                    out = _run(impl, x, w, eps)
                if impl.op == "rmsnorm_fp8":
                    scales = out[1].float().cpu()
                    loud = torch.isnan(scales).all(dim=1)
                elif impl.op in registry.BACKWARD_OPS:
                    loud = torch.isnan(out.float().cpu()).all(dim=1)
                    ref = reference.rmsnorm_backward(x[1:2], w, torch.ones_like(x[1:2]), eps,
                                                     accum=torch.float64)
                    ok = checks.allclose(out[1:2], ref["dx"], scale=ref["dx_scale"])
                    assert ok, f"{impl.name} {dtype} eps={eps}: {ok}"
                else:
                    y = out.float().cpu()
                    loud = torch.isnan(y).all(dim=1)
                    ok = checks.allclose(out[1:2], reference.rmsnorm(x[1:2], w, eps,
                                                                     accum=torch.float64))
                    assert ok, f"{impl.name} {dtype} eps={eps}: {ok}"
                expected = [True, False, True, eps == 0.0]
                assert loud.tolist() == expected, f"{impl.name} {dtype} eps={eps}: {loud.tolist()}"
                assert not torch.isnan(scales[1]).any() if impl.op == "rmsnorm_fp8" else True
            seen.append(impl.name)
    return seen


def test_every_kernel_route_is_loud_where_the_policy_says():
    seen = check_policy_on_every_route(ENV.device)
    routes = {registry.get(n).route for n in seen}
    assert {"triton", "hip"} <= routes and any(n.startswith("fp8") for n in seen)
    assert any(n.startswith("capstone") for n in seen)


@pytest.mark.gpu
def test_gpu_every_kernel_route_is_loud_where_the_policy_says():
    assert check_policy_on_every_route(torch.device("cuda"))


def test_the_policy_table_is_one_table_of_rejected_computed_loud():
    rows = v.input_policy(4096)
    assert 8 <= len(rows) <= 16
    assert {r["kind"] for r in rows} == {"rejected", "computed", "loud", "peer"}
    text = " ".join(r["input"] for r in rows)
    assert f"{v.overflow_rms(4096):.1e}" in text and f"{v.EPS0_MIN_RMS:.1e}" in text
    assert v.overflow_rms(4096) == pytest.approx(2.88e17, rel=1e-3)
    assert v.INPUT_POLICY == v.input_policy()
    with pytest.raises(v.InputError):
        v.overflow_rms(0)


def test_the_overflow_threshold_is_where_the_kernels_turn_loud():
    from fusedrms.kernels import rmsnorm

    cols = 64
    edge = v.overflow_rms(cols)
    w = torch.ones(cols, device=ENV.device)
    below = rmsnorm.rmsnorm_row(torch.full((1, cols), 0.99 * edge, device=ENV.device), w)
    above = rmsnorm.rmsnorm_row(torch.full((1, cols), 1.01 * edge, device=ENV.device), w)
    assert torch.allclose(below.cpu(), torch.ones(1, cols), rtol=1e-5)
    assert torch.isnan(above).all()
    tiny = torch.full((1, cols), 0.9 * v.EPS0_MIN_RMS, device=ENV.device)
    assert torch.isnan(rmsnorm.rmsnorm_row(tiny, w, 0.0)).all()
    small = torch.full((1, cols), 1.1 * v.EPS0_MIN_RMS, device=ENV.device)
    assert torch.allclose(rmsnorm.rmsnorm_row(small, w, 0.0).cpu(), torch.ones(1, cols), rtol=1e-5)
