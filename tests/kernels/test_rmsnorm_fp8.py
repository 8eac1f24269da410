"""Chapter 8: RMSNorm + FP8 block quantization (fusedrms.kernels.rmsnorm_fp8): the kernels equal
the specification bit for bit."""
import dataclasses
import json
import math

import pytest
import torch

from fusedrms import env, records, registry, validation
from fusedrms.book import ch08
from fusedrms.kernels import rmsnorm_fp8 as q
from fusedrms.kernels import rmsnorm_fp8_cli as qcli
from fusedrms.kernels import rmsnorm_fp8_spec as spec

ENV = env.current()
DEV = ENV.device
BF16 = torch.bfloat16


def bits(codes):
    return spec.code_bits(codes)


# ---------------------------------------------------------------- software rounding = torch

def _all_bf16_values_up_to(limit):
    patterns = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(BF16).float()
    return patterns[torch.isfinite(patterns) & (patterns.abs() <= limit)]


def test_software_e4m3_rounding_matches_torch_on_every_bf16_value_and_the_ties():
    values = _all_bf16_values_up_to(600.0)  # beyond 448: the clamp
    grid = torch.arange(0, 256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    grid = grid[torch.isfinite(grid)].unique()
    ties = (grid[1:] + grid[:-1]) / 2  # exactly half-way between neighbouring codes
    nudged = torch.cat([ties.nextafter(torch.tensor(math.inf)), ties.nextafter(torch.tensor(-math.inf))])
    extra = torch.tensor([127.09, 500.0, 464.0, 1.0625, 2 ** -10, 2 ** -10 * 1.01, 2 ** -9 * 1.5,
                          1e-30, -0.0, 0.0, 449.0, 1e6])
    vals = torch.cat([values, ties, nudged, extra])
    vals = torch.cat([vals, -vals])
    for start in range(0, vals.numel(), 65536):
        chunk = vals[start:start + 65536]
        got = ch08.triton_cast_to_fp8(chunk, software=True).cpu()
        want = chunk.clamp(-448, 448).to(torch.float8_e4m3fn)
        diff = bits(got) != bits(want)
        assert not diff.any(), (chunk[diff][:5], bits(got)[diff][:5], bits(want)[diff][:5])


def test_software_e4m3_rounding_keeps_nan():
    got = ch08.triton_cast_to_fp8(torch.tensor([math.nan]), software=True).cpu()
    assert int(bits(got)[0]) & 0x7F == 0x7F


def test_software_bf16_rounding_matches_torch():
    g = torch.Generator().manual_seed(3)
    v = torch.randn(60000, generator=g) * torch.exp2(torch.randint(-20, 20, (60000,), generator=g))
    base = torch.randn(4000, generator=g).to(BF16).float()
    _, exponent = torch.frexp(base)  # base = m * 2^e, m in [0.5, 1): a bf16 step is 2^(e-8)
    ties = base + torch.ldexp(torch.ones_like(base), exponent - 9)  # exactly half a step up
    assert torch.equal(ties.to(BF16).float(), ties.to(torch.float64).to(BF16).float())
    vals = torch.cat([v, ties])
    got = ch08.triton_round_to_bf16(vals, software=True).cpu()
    assert torch.equal(got, vals.to(BF16).float())


def test_software_path_refuses_unclamped_values():
    with pytest.raises(validation.InputError, match="448"):
        ch08.triton_cast_to_fp8([500.0], software=True, clamp=False)


# ---------------------------------------------------------------- kernels = reference, bit for bit

SHAPES = [(1, 1), (1, 128), (3, 127), (3, 129), (2, 200), (2, 7168), (1, 16384)]


@pytest.mark.parametrize("contract", list(spec.CONTRACTS))
@pytest.mark.parametrize("version", ["fp8.naive", "fp8.fused"])
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_kernels_match_the_reference_bit_for_bit(version, rows, cols, contract):
    fn = registry.get(version).fn
    for seed in (0, 1):
        x, w = spec.make_inputs(rows, cols, seed)
        report = spec.compare(*fn(x, w, 1e-6, contract=contract),
                              *spec.reference(x, w, 1e-6, contract=contract))
        assert report.ok, f"{version} {contract} {rows}x{cols} seed {seed}: {report}"


def test_the_library_follows_the_served_contract_and_the_two_differ():
    """fp8.fused's default is the served contract; the exact one moves a few codes of 64 rows
    (a check that could not tell the contracts apart would pass either way)."""
    assert spec.DEFAULT_CONTRACT == "served"
    x, w = spec.make_inputs(64, 7168, 0)
    served, exact = spec.reference(x, w, contract="served"), spec.reference(x, w, contract="exact")
    assert spec.compare(*q.rmsnorm_fp8_fused(x, w), *served).ok
    moved = spec.compare(*q.rmsnorm_fp8_fused(x, w), *exact).mismatches
    assert 0 < moved < x.numel() // 1000, moved
    assert torch.equal(served[1].cpu(), exact[1].cpu())  # RN(absmax / 448) in both


def test_contracts_refuse_unknown_names_and_rows_per_program_is_exact_only():
    x, w = spec.make_inputs(2, 256, 0)
    for fn in (q.rmsnorm_fp8_fused, q.rmsnorm_fp8_naive, spec.reference):
        with pytest.raises(validation.InputError, match="contract must be one of 'exact', 'served'"):
            fn(x, w, contract="fast")
    rows = q.FusedConfig(8, None, "block_reciprocal", 2)
    with pytest.raises(validation.InputError, match="runs the exact contract only"):
        q.rmsnorm_fp8_fused(x, w, config=rows)
    assert spec.compare(*q.rmsnorm_fp8_fused(x, w, config=rows, contract="exact"),
                        *spec.reference(x, w, contract="exact")).ok


def test_eps_and_floor_are_honoured():
    x, w = spec.make_inputs(3, 300, seed=4)
    for eps, floor in ((1e-2, 0.0), (0.0, 1e-10), (1e-5, 0.5)):
        for fn in (q.rmsnorm_fp8_fused, q.rmsnorm_fp8_naive):
            for contract in spec.CONTRACTS:
                report = spec.compare(*fn(x, w, eps, absmax_floor=floor, contract=contract),
                                      *spec.reference(x, w, eps, floor, contract=contract))
                assert report.ok, (eps, floor, contract, report)


def test_leading_dimensions_and_strided_rows():
    x, w = spec.make_inputs(6, 256, seed=7)
    x3 = x.reshape(2, 3, 256)
    codes, scales = q.rmsnorm_fp8_fused(x3, w)
    assert codes.shape == (2, 3, 256) and scales.shape == (2, 3, 2) and scales.is_contiguous()
    wide = torch.zeros(6, 300, dtype=BF16, device=x.device)
    wide[:, :256] = x
    report = spec.compare(*q.rmsnorm_fp8_fused(wide[:, :256], w), *spec.reference(x, w))
    assert report.ok, report


def test_empty_rows():
    x = torch.empty(0, 256, dtype=BF16, device=DEV)
    w = torch.ones(256, dtype=BF16, device=DEV)
    codes, scales = q.rmsnorm_fp8_naive(x, w)
    assert codes.shape == (0, 256) and scales.shape == (0, 2)


FP8_PATHS = {"naive": dict(fn=q.rmsnorm_fp8_naive), "fused": dict(fn=q.rmsnorm_fp8_fused),
             "naive exact": dict(fn=q.rmsnorm_fp8_naive, contract="exact"),
             "fused exact": dict(fn=q.rmsnorm_fp8_fused, contract="exact"),
             "rows": dict(fn=q.rmsnorm_fp8_fused, config=q.FusedConfig(8, None, "block_reciprocal", 2),
                          contract="exact"),
             "split": dict(fn=q.rmsnorm_fp8_fused,
                           config=q.FusedConfig(4, None, "block_reciprocal", 1, "split")),
             "split exact": dict(fn=q.rmsnorm_fp8_fused, contract="exact",
                                 config=q.FusedConfig(4, None, "block_reciprocal", 1, "split")),
             "per_element": dict(fn=q.rmsnorm_fp8_fused, config=q.FusedConfig(8, None, "per_element"),
                                 contract="exact"),
             "lean": dict(fn=q.rmsnorm_fp8_fused,
                          config=q.FusedConfig(4, None, "block_reciprocal", lean=True)),
             "lean exact": dict(fn=q.rmsnorm_fp8_fused, contract="exact",
                                config=q.FusedConfig(4, None, "block_reciprocal", lean=True)),
             "split lean exact": dict(fn=q.rmsnorm_fp8_fused, contract="exact",
                                      config=q.FusedConfig(4, None, "block_reciprocal", 1, "split",
                                                           lean=True))}


def _nan_blocks(codes, scales):
    """Per block: (scale NaN, every code NaN) as two bool tensors."""
    nb = scales.shape[-1]
    padded = torch.nn.functional.pad(bits(codes).to(torch.int16), (0, nb * 128 - codes.shape[-1]),
                                     value=0x7F)
    all_nan = ((padded.reshape(*codes.shape[:-1], nb, 128) & 0x7F) == 0x7F).all(-1)
    return torch.isnan(scales.cpu()), all_nan


@pytest.mark.parametrize("path", list(FP8_PATHS))
def test_nan_in_nan_out_per_block_kernels_agree_with_the_reference(path, rounding="auto"):
    """Issue 17: the policy. A NaN or Inf in x (or an overflowed sum of squares) makes the whole
    row NaN; a NaN or Inf in gamma makes its block NaN (scale and every code); the rest is exact."""
    kw = dict(FP8_PATHS[path])
    fn, config = kw.pop("fn"), kw.pop("config", None)
    contract = kw.pop("contract", spec.DEFAULT_CONTRACT)
    x, w = spec.make_inputs(6, 7168 if path.startswith("split") else 512, seed=3)
    x[1, 5] = float("nan")
    x[2, 300] = float("inf")
    x[3] = 1e19  # bf16 holds it; the fp32 sum of squares overflows
    w[130] = float("nan")  # block 1 of every row
    w[260] = float("-inf")  # block 2 of every row
    extra = {"rounding": rounding} if config is None else {"config": config, "rounding": rounding}
    codes, scales = fn(x, w, contract=contract, **extra)
    ref_codes, ref_scales = spec.reference(x, w, contract=contract)
    report = spec.compare(codes, scales, ref_codes, ref_scales)
    assert report.ok, report
    scale_nan, codes_nan = _nan_blocks(codes, scales)
    assert torch.equal(scale_nan, codes_nan)  # a NaN scale always comes with NaN codes
    assert scale_nan[[1, 2, 3]].all()  # whole rows
    assert scale_nan[:, 1].all() and scale_nan[:, 2].all()  # gamma's blocks in every row
    assert not scale_nan[[0, 4, 5]][:, [0, 3]].any()  # everything else finite


@pytest.mark.gpu
@pytest.mark.parametrize("rounding", ["cast", "software"])
def test_gpu_nan_in_nan_out_per_block_on_every_path(rounding):
    if rounding == "cast" and not q.hardware_fp8_support()[0]:
        pytest.skip(q.hardware_fp8_support()[1])
    for path in FP8_PATHS:
        test_nan_in_nan_out_per_block_kernels_agree_with_the_reference(path, rounding)


def test_zero_block_without_floor_gives_nan_codes_everywhere_alike():
    x, w = spec.make_inputs(2, 384, seed=0, zero_block=True)
    ref_codes, ref_scales = spec.reference(x, w, absmax_floor=0.0)
    assert float(ref_scales[0, 0]) == 0.0
    assert bool(((bits(ref_codes)[0, :128] & 0x7F) == 0x7F).all())
    for fn in (q.rmsnorm_fp8_fused, q.rmsnorm_fp8_naive):
        codes, scales = fn(x, w, absmax_floor=0.0)
        assert spec.compare(codes, scales, ref_codes, ref_scales).ok


def test_zero_block_with_the_default_floor():
    x, w = spec.make_inputs(2, 384, seed=0, zero_block=True)
    codes, scales = q.rmsnorm_fp8_fused(x, w)
    assert float(scales[0, 0]) == float(torch.tensor(1e-4) / torch.tensor(448.0))
    assert int(bits(codes)[0, :128].max()) == 0 and spec.compare(codes, scales, *spec.reference(x, w)).ok


# ---------------------------------------------------------------- errors a reader can cause

@pytest.mark.parametrize("make, match", [
    (lambda: (torch.randn(2, 256, device=DEV), torch.ones(256, dtype=BF16, device=DEV)), "bfloat16"),
    (lambda: (torch.randn(2, 256, device=DEV).to(BF16), torch.ones(256, device=DEV)), "bfloat16"),
    (lambda: (torch.randn(2, 256, device=DEV).to(BF16), torch.ones(255, dtype=BF16, device=DEV)),
     r"\(256,\)"),
    (lambda: (torch.randn(1, 16385, device=DEV).to(BF16), torch.ones(16385, dtype=BF16, device=DEV)),
     "16384"),
    (lambda: (torch.randn(2, 256, device=DEV).to(BF16).to_sparse(),
              torch.ones(256, dtype=BF16, device=DEV)), "sparse_coo tensor"),
])
def test_clear_errors(make, match):
    x, w = make()
    for fn in (q.rmsnorm_fp8_fused, q.rmsnorm_fp8_naive):
        with pytest.raises(validation.InputError, match=match):
            fn(x, w)


@pytest.mark.parametrize("kwargs, match", [
    ({"absmax_floor": -1.0}, "absmax_floor"), ({"absmax_floor": math.nan}, "absmax_floor"),
    ({"absmax_floor": "big"}, "absmax_floor"), ({"absmax_floor": "1e-4"}, "absmax_floor must be"),
    ({"absmax_floor": True}, "absmax_floor must be"), ({"absmax_floor": 1e-40}, "absmax_floor="),
    ({"absmax_floor": 1e39}, "absmax_floor="), ({"rounding": "nearest"}, "rounding"),
    ({"eps": -1.0}, "eps"), ({"num_warps": 3}, "num_warps"),
])
def test_clear_errors_for_options(kwargs, match):
    x, w = spec.make_inputs(1, 128, 0)
    fns = [q.rmsnorm_fp8_fused]
    if "absmax_floor" in kwargs:  # issue 26: the floor is checked on every entry point
        fns += [q.rmsnorm_fp8_naive, q.rmsnorm_fp8_approx, spec.reference, spec.reference_reordered]
    for fn in fns:
        with pytest.raises(validation.InputError, match=match):
            fn(x, w, **kwargs)


def test_forward_only_wrappers_refuse_inputs_that_require_grad():
    """Issue 26: the codes and scales had no grad_fn, so backward() silently skipped the norm."""
    x, w = spec.make_inputs(2, 256, 0)
    expected = q.rmsnorm_fp8_fused(x, w)
    calls = {"fp8.fused": q.rmsnorm_fp8_fused, "fp8.naive": q.rmsnorm_fp8_naive,
             "fp8.approx": q.rmsnorm_fp8_approx}
    for kernel, fn in calls.items():
        for args, name in (((x.clone().requires_grad_(), w), "x"),
                           ((x, torch.nn.Parameter(w.clone())), "w")):
            with pytest.raises(validation.InputError,
                               match=f"{name} requires grad, but {kernel} is forward only"):
                fn(*args)
    with torch.no_grad():
        report = spec.compare(*q.rmsnorm_fp8_fused(x.clone().requires_grad_(), w), *expected)
    assert report.ok, report


def test_old_gpus_get_the_software_path_or_a_clear_error(monkeypatch):
    fake = env.Env("cuda", torch.device("cuda"), "NVIDIA A100", "compiled for the GPU", "nvcc",
                   {"torch": torch.__version__, "python": "3"})
    monkeypatch.setattr(env, "current", lambda: fake)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    assert q.resolve_rounding("auto") == "software"
    with pytest.raises(validation.InputError, match=r"capability 8\.0.*rounding='software'"):
        q.resolve_rounding("cast")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert q.resolve_rounding("auto") == "cast"


@pytest.mark.skipif(ENV.on_gpu, reason="the interpreter's path")
def test_auto_is_software_under_the_interpreter():
    assert q.resolve_rounding("auto") == "software"


def test_registered_with_the_op_signature():
    impls = {i.name: i for i in registry.impls("rmsnorm_fp8")}
    assert {"fp8.naive", "fp8.fused"} <= set(impls)
    for name in ("fp8.naive", "fp8.fused"):
        impl = impls[name]
        assert impl.supports(DEV.type, BF16, 7168) and not impl.supports(DEV.type, torch.float32, 7168)
        x, w = spec.make_inputs(2, 300, 0)
        codes, scales = impl.fn(x, w, 1e-6)
        assert codes.dtype == torch.float8_e4m3fn and scales.shape == (2, 3)


# ---------------------------------------------------------------- traffic prices (chapter 2's model)

def test_traffic_prices_match_first_principles():
    traffic = pytest.importorskip("fusedrms.traffic")
    rows, cols = 2, 7168
    x, w, codes, scales = rows * cols * 2, cols * 2, rows * cols, rows * 56 * 4
    naive = traffic.price("rmsnorm_fp8_naive", rows, cols, "bf16", bandwidth_GBps=4800)
    fused = traffic.price("rmsnorm_fp8_fused", rows, cols, "bf16", bandwidth_GBps=4800)
    assert (fused.bytes_read, fused.bytes_written) == (x + w, codes + scales) == (43008, 14784)
    assert (naive.bytes_read, naive.bytes_written) == (x + w + x, x + codes + scales) == (71680, 43456)
    assert (naive.ideal_ns, fused.ideal_ns) == (24, 13)


# ---------------------------------------------------------------- recorded results


def test_kernel_resources_runs_everywhere():
    res = q.kernel_resources(rows=2, cols=300)
    assert res["num_warps"] == 4 and set(res) >= {"fused_registers", "norm_spills"}
    if ENV.on_gpu and ENV.backend == "cuda":
        assert res["fused_registers"] > 0


# ---------------------------------------------------------------- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("contract", list(spec.CONTRACTS))
def test_gpu_bit_exact_at_scale_all_paths(contract):
    for seed in (0, 1, 2):
        x, w = spec.make_inputs(1024, 7168, seed)
        ref = spec.reference(x, w, contract=contract)
        c = {"contract": contract}
        for name, out in (("fused", q.rmsnorm_fp8_fused(x, w, **c)),
                          ("naive", q.rmsnorm_fp8_naive(x, w, **c)),
                          ("fused software", q.rmsnorm_fp8_fused(x, w, rounding="software", **c)),
                          ("naive software", q.rmsnorm_fp8_naive(x, w, rounding="software", **c))):
            report = spec.compare(*out, *ref)
            assert report.ok, f"{name} seed {seed}: {report}"


@pytest.mark.gpu
def test_gpu_repeated_calls_take_the_direct_launch_and_stay_exact():
    """The second call of a shape skips Triton's launch path (the plan's direct launch); its codes
    must still be the contract's, on fresh inputs of the same shape and on an unaligned view."""
    q._PLANS.clear()
    x, w = spec.make_inputs(33, 7168, 0)
    q.rmsnorm_fp8_fused(x, w)
    plan = next(iter(q._PLANS.values()))
    assert plan.direct is not None
    for seed in (1, 2):
        x2, _ = spec.make_inputs(33, 7168, seed)
        assert spec.compare(*q.rmsnorm_fp8_fused(x2, w), *spec.reference(x2, w)).ok
        # software rounding writes the codes as bytes: the plan passes the fp8 codes' address
        for _ in range(2):
            got = q.rmsnorm_fp8_fused(x2, w, rounding="software")
            assert got[0].dtype == spec.FP8_DTYPE
            assert spec.compare(*got, *spec.reference(x2, w)).ok
    buf = torch.empty(33 * 7168 + 1, dtype=BF16, device=x.device)
    odd = buf[1:].view(33, 7168)
    odd.copy_(x)
    assert spec.compare(*q.rmsnorm_fp8_fused(odd, w), *spec.reference(x, w)).ok


@pytest.mark.gpu
def test_gpu_reference_equals_cpu_reference():
    x, w = spec.make_inputs(256, 7168, 3)
    gpu = spec.reference(x, w)
    cpu = spec.reference(x.cpu(), w.cpu())
    assert spec.compare(*gpu, *cpu).ok


@pytest.mark.gpu
def test_gpu_hardware_cast_is_correct_after_clamping():
    vals = _all_bf16_values_up_to(600.0)
    for software in (False, True):
        got = ch08.triton_cast_to_fp8(vals[:65536], software=software).cpu()
        assert torch.equal(bits(got), bits(vals[:65536].clamp(-448, 448).to(torch.float8_e4m3fn)))


@pytest.mark.gpu
def test_gpu_reports_hardware_support():
    supported, why = q.hardware_fp8_support()
    major, minor = torch.cuda.get_device_capability()
    assert supported == (ENV.backend == "cuda" and (major, minor) >= (8, 9)), why


# ---------------------------------------------------------------- command line

def test_cli_check(capsys):
    assert qcli.main(["check", "--rows", "2", "--cols", "300"]) == 0
    assert "fused: PASS" in capsys.readouterr().out


@pytest.mark.parametrize("argv,match", [
    (["--rows", "65536", "--cols", "16384"], "elements; at most"),  # issue 26: OOM-killed
    (["--rows", "0"], "--rows: must be a whole number from 1"),
    (["--cols", "16385"], "--cols: must be a whole number from 1 to 16384"),
])
def test_cli_refuses_what_it_cannot_check_with_usage(argv, match, capsys):
    with pytest.raises(SystemExit) as e:
        qcli.main(["check", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage: python -m fusedrms.kernels.rmsnorm_fp8 check" in err and match in err


def test_cli_size_limits_fit_the_interpreter_and_the_device(capsys):
    assert qcli.cli_size_problem(4, 7168, on_gpu=False) == ""  # the default fits
    assert qcli.cli_size_problem(8, 16384, on_gpu=False) == ""  # 1024 row-blocks
    slow = qcli.cli_size_problem(9, 16384, on_gpu=False)
    assert "1,152 blocks of 128 columns" in slow and "--rows 8 or fewer" in slow
    if not ENV.on_gpu:
        with pytest.raises(SystemExit) as e:
            qcli.main(["check", "--rows", "65536", "--cols", "128"])
        assert e.value.code == 2 and "--rows 1024 or fewer" in capsys.readouterr().err
    gib = 1 << 30
    assert qcli.cli_size_problem(65536, 16384, True, device_free=140 * gib, host_free=100 * gib) == ""
    short = qcli.cli_size_problem(65536, 16384, True, device_free=16 * gib, host_free=100 * gib)
    assert "needs about 24.0 GiB on the GPU" in short and "16.0 GiB is free" in short
    host = qcli.cli_size_problem(65536, 16384, True, device_free=140 * gib, host_free=8 * gib)
    assert "of host memory" in host


# ---------------------------------------------------------------- launch candidates and the table

@pytest.mark.parametrize("version", ["fp8.naive", "fp8.fused"])
@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 127), (3, 129), (2, 7168), (1, 16384)])
def test_block_reciprocal_division_is_bit_exact(version, rows, cols):
    fn = registry.get(version).fn
    for seed in (0, 1):
        x, w = spec.make_inputs(rows, cols, seed)
        report = spec.compare(*fn(x, w, division="block_reciprocal", contract="exact"),
                              *spec.reference(x, w, contract="exact"))
        assert report.ok, f"{version} {rows}x{cols} seed {seed}: {report}"


def test_a_reciprocal_without_the_corrections_is_caught():
    """y * (1 / scale) alone differs from y / scale now and then: the check must see it."""
    x, w = spec.make_inputs(64, 7168, 0)
    ref_codes, ref_scales = spec.reference(x, w, contract="exact")
    rows, cols = x.shape
    y = (x.float() * spec.row_rscale(x, spec.RMS_NORM_EPS)).to(BF16) * w
    blocks = y.float().reshape(rows, -1, spec.BLOCK_COLS)
    inv = 1.0 / ref_scales.cpu()[..., None]
    codes = (blocks.cpu() * inv).clamp(-spec.FP8_MAX, spec.FP8_MAX).to(spec.FP8_DTYPE).reshape(rows, cols)
    assert spec.compare(codes, ref_scales, ref_codes, ref_scales).mismatches > 0


def test_bad_division_and_config_get_clear_errors():
    x, w = spec.make_inputs(2, 256, 0)
    with pytest.raises(validation.InputError, match="division must be one of"):
        q.rmsnorm_fp8_fused(x, w, division="fast")
    with pytest.raises(validation.InputError, match="config must be a FusedConfig"):
        q.rmsnorm_fp8_fused(x, w, config=(8, None, "per_element"))


@pytest.mark.gpu
def test_gpu_chosen_and_new_designs_are_bit_exact_at_scale():
    """The configuration fp8.fused runs here, and one of each new design (08_fp8.sh checks all)."""
    x, w = spec.make_inputs(1024, 7168, 3)
    ref = spec.reference(x, w, contract="exact")
    for cfg in {q.choose_config(7168)[0], q.FusedConfig(16, 64, "block_reciprocal"),
                q.FusedConfig(8, None, "block_reciprocal", 2),
                q.FusedConfig(4, None, "block_reciprocal", 1, "split"),
                q.FusedConfig(4, None, "block_reciprocal", 1, "split", lean=True)}:
        report = spec.compare(*q.rmsnorm_fp8_fused(x, w, config=cfg, contract="exact"), *ref)
        assert report.ok, f"{cfg.label}: {report}"
    served = spec.reference(x, w)
    for cfg in {q.choose_config(7168)[0], q.FusedConfig(16, 64, "block_reciprocal"),
                q.FusedConfig(4, None, "block_reciprocal", 1, "split"),
                q.FusedConfig(4, None, "block_reciprocal", lean=True)}:
        report = spec.compare(*q.rmsnorm_fp8_fused(x, w, config=cfg), *served)
        assert report.ok, f"served, {cfg.label}: {report}"


@pytest.mark.parametrize("rows_per_program", [2, 4])
@pytest.mark.parametrize("division", ["per_element", "block_reciprocal"])
def test_several_rows_per_program_is_bit_exact(rows_per_program, division):
    cfg = q.FusedConfig(8, None, division, rows_per_program)
    for rows, cols in [(1, 1), (3, 129), (5, 200), (3, 7168)]:  # row counts not a multiple of R
        x, w = spec.make_inputs(rows, cols, 0)
        report = spec.compare(*q.rmsnorm_fp8_fused(x, w, config=cfg, contract="exact"),
                              *spec.reference(x, w, contract="exact"))
        assert report.ok, f"{cfg.label} {rows}x{cols}: {report}"
    with pytest.raises(validation.InputError, match="rows_per_program"):
        q.rmsnorm_fp8_fused(x, w, config=q.FusedConfig(8, None, division, 3), contract="exact")


@pytest.mark.parametrize("division", ["per_element", "block_reciprocal"])
def test_unpadded_split_tile_is_bit_exact(division):
    assert q.split_pieces(56) == (32, 16, 8) and q.split_pieces(64) is None
    cfg = q.FusedConfig(8, None, division, 1, "split")
    for rows, cols in [(2, 7168), (3, 7000), (2, 896), (3, 129)]:  # 3 pieces, or the padded fallback
        x, w = spec.make_inputs(rows, cols, 1)
        report = spec.compare(*q.rmsnorm_fp8_fused(x, w, config=cfg), *spec.reference(x, w))
        assert report.ok, f"{cfg.label} {rows}x{cols}: {report}"
    with pytest.raises(validation.InputError, match="tile must be one of"):
        q.rmsnorm_fp8_fused(x, w, config=q.FusedConfig(8, None, division, 2, "split"))


def test_every_launch_keyword_is_a_parameter_of_its_kernel():
    # Triton on a GPU rejects keywords a kernel does not declare; the interpreter ignores them.
    x, w = spec.make_inputs(2, 256, 0)
    options = {"num_warps", "num_stages", "maxnreg"}
    for contract in spec.CONTRACTS:
        *_, meta = q._launch_setup(x, w, 1e-6, spec.ABSMAX_FLOOR, "auto", None, contract=contract)
        for kernel, kwargs in ((q.rmsnorm_bf16_kernel, q.norm_meta(meta)),
                               (q.quantize_fp8_kernel, q.quantize_meta(meta))):
            unknown = set(kwargs) - options - set(kernel.arg_names)
            assert not unknown, f"{kernel.fn.__name__} does not declare {unknown}"
            missing = {n for n in kernel.arg_names if n.isupper()} - set(kwargs) - {"FP8_MAX"}
            assert not missing, f"{kernel.fn.__name__} is not given {missing}"


@pytest.mark.parametrize("config", sorted(set(q.CANDIDATES), key=str))
def test_every_candidate_launch_gives_its_kernel_exactly_the_keywords_it_declares(config):
    x, w = spec.make_inputs(2, 7168, 0)
    for contract in spec.CONTRACTS:
        if not config.runs(contract):
            continue
        x2, w2, eps, floor, _, _, codes_out, scales, meta = q._launch_setup(
            x, w, 1e-6, spec.ABSMAX_FLOOR, "auto", None, True, None, config, contract)
        kernel, _, kwargs, options = q._fused_launch(x2, w2, codes_out, scales, eps, floor, meta)
        declared = set(kernel.arg_names)
        assert set(kwargs) <= declared, f"{config.label}: {set(kwargs) - declared}"
        assert {n for n in declared if n.isupper()} <= set(kwargs) | {"EXACT_R"}, config.label
        assert kwargs.get("LEAN", False) is config.lean or kernel is q.rmsnorm_fp8_fused_rows_kernel


@pytest.mark.parametrize("path", list(FP8_PATHS))
def test_bf16_subnormals_give_the_specification_s_codes_and_scales(path):
    """Issue 26: on the CPU route bf16 values below 1.18e-38 were read up to 8x off and a subnormal
    block's scale came back 0, its codes NaN, failing the bit-exact comparison."""
    x = torch.full((2, 256), 3e-39, dtype=BF16, device=DEV)
    x[:, :128] = 1.0  # block 0 normal, block 1 subnormal (a subnormal scale)
    x[1, 128::3] = -1.5e-39
    x[1, 129::5] = 9.2e-41
    w = torch.ones(256, dtype=BF16, device=DEV)
    w[::7] = 0.5
    fn, config = FP8_PATHS[path]["fn"], FP8_PATHS[path].get("config")
    contract = FP8_PATHS[path].get("contract", spec.DEFAULT_CONTRACT)
    kwargs = {"contract": contract} if config is None else {"config": config, "contract": contract}
    for eps, floor in ((1e-6, 0.0), (0.0, 0.0), (1e-6, 1e-4)):
        report = spec.compare(*fn(x, w, eps, absmax_floor=floor, **kwargs),
                              *spec.reference(x, w, eps, floor, contract=contract))
        assert report.ok, (eps, floor, report)


def test_approx_kernel_is_close_but_not_the_specification():
    """The diagnostic kernel (fp32 sum, rsqrt, multiply by 448/absmax) lands within a code step of
    the exact one almost everywhere. (The interpreter truncates its bf16 casts, so here scales
    move by up to a bf16 step, about 0.8 %; on a GPU they round to nearest.)"""
    from fusedrms.kernels import rmsnorm_fp8 as Q

    x, w = spec.make_inputs(6, 1000, seed=3)
    codes, scales = Q.rmsnorm_fp8_approx(x, w)
    ref_codes, ref_scales = spec.reference(x, w)
    assert codes.shape == ref_codes.shape and scales.shape == ref_scales.shape
    assert torch.allclose(scales, ref_scales, rtol=1e-2 if env.current().on_gpu else 2e-2)
    steps = (spec.code_bits(codes).to(torch.int16) - spec.code_bits(ref_codes).to(torch.int16)).abs()
    assert (steps <= 1).float().mean() > 0.95
    assert torch.isfinite(scales).all()


def test_the_plan_returns_what_the_full_path_returns_for_any_leading_shape():
    """Codes in x's shape and scales in x's leading shape plus the blocks, contiguous, on the
    first call (the full path) and on the repeated one (the plan), whatever x's leading shape."""
    x3, w = spec.make_inputs(6, 256, 3)
    odd = torch.empty_strided((1, 256), (7, 1), dtype=x3.dtype)  # contiguous, odd unit stride
    odd.copy_(x3[:1])
    for x in (x3.view(2, 3, 256), x3.view(1, 2, 3, 256), x3[0], odd):
        q._PLANS.clear()
        outs = [q.rmsnorm_fp8_fused(x, w) for _ in range(2)]
        assert len(q._PLANS) == 1
        want = spec.reference(x.reshape(-1, 256), w)
        for codes, scales in outs:
            assert codes.shape == x.shape and scales.shape == x.shape[:-1] + (2,)
            assert codes.is_contiguous() and scales.is_contiguous()
            assert codes.stride() == torch.empty(x.shape).stride()
            assert spec.compare(codes.reshape(-1, 256), scales.reshape(-1, 2), *want).ok


def test_a_plan_made_under_inference_mode_gives_ordinary_tensors_outside_it():
    """The plan's output templates come from the first call; outside inference mode a repeated
    call must still return tensors autograd can use."""
    q._PLANS.clear()
    x, w = spec.make_inputs(2, 256, 0)
    with torch.inference_mode():
        assert q.rmsnorm_fp8_fused(x, w)[0].is_inference()
    codes, scales = q.rmsnorm_fp8_fused(x, w)
    assert len(q._PLANS) == 1
    assert not codes.is_inference() and not scales.is_inference()
    assert spec.compare(codes, scales, *spec.reference(x, w)).ok


def test_a_repeated_call_skips_to_the_launch_and_gives_the_same_bits():
    """The second call with the same layout uses the remembered plan: same codes and scales as
    the full path, for new values in the same tensors' layout; anything else takes the full path."""
    q._PLANS.clear()
    x, w = spec.make_inputs(3, 256, 0)
    first = q.rmsnorm_fp8_fused(x, w)
    assert len(q._PLANS) == 1
    x2, _ = spec.make_inputs(3, 256, 1)  # new values, same layout: the plan
    got = q.rmsnorm_fp8_fused(x2, w)
    assert len(q._PLANS) == 1
    assert spec.compare(*got, *spec.reference(x2, w))
    assert not torch.equal(got[0].view(torch.uint8), first[0].view(torch.uint8))
    # a strided x: the full path (no plan for it), still right
    wide, _ = spec.make_inputs(3, 512, 2)
    got = q.rmsnorm_fp8_fused(wide[:, :256], w)
    assert spec.compare(*got, *spec.reference(wide[:, :256], w))
    # the plan never hides a check: another eps is validated on the full path
    with pytest.raises(validation.InputError):
        q.rmsnorm_fp8_fused(x2, w, eps=-1.0)
    with pytest.raises(validation.InputError):
        q.rmsnorm_fp8_fused(x2.requires_grad_(True), w)
