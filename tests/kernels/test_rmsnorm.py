"""fusedrms.kernels.rmsnorm: every variant on the boundary shapes, the validation, the CLI, helpers."""
import math

import pytest
import torch

from fusedrms import checks, env, reference, registry
from fusedrms.book import ch04
from fusedrms.kernels import rmsnorm as T
from fusedrms.validation import InputError

ENV = env.current()
DEV = ENV.device
VARIANTS = {"row": T.rmsnorm_row, "looped": T.rmsnorm_looped, "multirow": T.rmsnorm_multirow}
BOUNDARY = [(1, 1), (3, 13), (33, 257), (5, 16), (2, 1000)]


def _inputs(rows, cols, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g).to(dtype).to(DEV)
    w = torch.randn(cols, generator=g).to(dtype).to(DEV)
    return x, w


def _check(y, x, w, eps=1e-5):
    report = checks.allclose(y, reference.rmsnorm(x, w, eps, accum=torch.float64))
    assert report, report


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("rows,cols", BOUNDARY)
def test_boundary_shapes_fp32(variant, rows, cols):
    x, w = _inputs(rows, cols)
    _check(VARIANTS[variant](x, w), x, w)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision(variant, dtype):
    x, w = _inputs(33, 257, dtype)
    y = VARIANTS[variant](x, w)
    assert y.dtype == dtype
    _check(y, x, w)


def test_mean_divides_by_real_width_not_block():
    # 13 columns of ones: mean square 1, so y = w / sqrt(1 + eps) exactly; a /16 would give sqrt(16/13)
    x = torch.ones(1, 13, device=DEV)
    w = torch.arange(1, 14, dtype=torch.float32, device=DEV)
    y = T.rmsnorm_row(x, w, eps=0.0)
    assert torch.allclose(y.cpu(), w.cpu().unsqueeze(0), rtol=1e-6)


def test_looped_several_chunks_and_a_partial_one():
    x, w = _inputs(4, 257)
    for chunk in (16, 64, 256):  # 257 = 16 x 16 + 1, ...: the last chunk holds one column
        _check(T.rmsnorm_looped(x, w, chunk=chunk), x, w)


def test_multirow_partial_last_program():
    x, w = _inputs(7, 13)
    for rpp in (1, 2, 4, 8, 16):  # 7 rows never fill the last program exactly (except 1)
        _check(T.rmsnorm_multirow(x, w, rows_per_program=rpp), x, w)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_row_stride_not_equal_to_cols(variant):
    big, w = _inputs(5, 40)
    w = w[:13].contiguous()
    x = big[:, 3:16]  # a view: row stride 40, 13 columns
    assert x.stride(0) == 40
    _check(VARIANTS[variant](x, w), x, w)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_leading_dims_and_transposed_input(variant):
    x3, w = _inputs(6, 13)
    x3 = x3.reshape(2, 3, 13)
    y = VARIANTS[variant](x3, w)
    assert y.shape == (2, 3, 13)
    _check(y, x3, w)
    xt = torch.randn(13, 4, device=DEV).t()  # column stride 4: copied to contiguous rows
    wt = torch.randn(13, device=DEV)
    _check(VARIANTS[variant](xt, wt), xt, wt)
    x1 = torch.randn(13, device=DEV)  # a single row as a vector keeps its shape
    assert VARIANTS[variant](x1, wt).shape == (13,)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_empty_rows_return_empty(variant):
    x = torch.empty(0, 64, device=DEV)
    w = torch.ones(64, device=DEV)
    y = VARIANTS[variant](x, w)
    assert y.shape == (0, 64) and y.dtype == x.dtype
    assert VARIANTS[variant](torch.empty(2, 0, 64, device=DEV), w).shape == (2, 0, 64)


def test_zero_and_nan_rows():
    x = torch.zeros(2, 13, device=DEV)
    w = torch.ones(13, device=DEV)
    assert torch.equal(T.rmsnorm_row(x, w).cpu(), torch.zeros(2, 13))
    x[1, 4] = float("nan")
    y = T.rmsnorm_row(x, w).cpu()
    assert torch.isnan(y[1]).all() and not torch.isnan(y[0]).any()


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("bad,match", [
    (lambda x, w: (x.to(torch.int32), w), "dtype int32"),
    (lambda x, w: (x, w[:-1]), "one weight per column"),
    (lambda x, w: (x, w.reshape(1, -1)), "one weight per column"),
    (lambda x, w: (x.tolist(), w), "torch.Tensor"),
    (lambda x, w: (x.to("meta"), w), "kernels here run on"),
    (lambda x, w: (torch.tensor(1.0, device=x.device), w), "scalar"),
    (lambda x, w: (x[:, :0], w), "zero columns"),
])
def test_bad_inputs_are_explained(variant, bad, match):
    x, w = _inputs(3, 13)
    xb, wb = bad(x, w)
    with pytest.raises(InputError, match=match):
        VARIANTS[variant](xb, wb)


def test_bad_eps_and_num_warps():
    x, w = _inputs(3, 13)
    with pytest.raises(InputError, match="eps"):
        T.rmsnorm_row(x, w, eps=-1.0)
    with pytest.raises(InputError, match="num_warps"):
        T.rmsnorm_row(x, w, num_warps=3)
    with pytest.raises(InputError, match="chunk"):
        T.rmsnorm_looped(x, w, chunk=24)
    with pytest.raises(InputError, match="rows_per_program"):
        T.rmsnorm_multirow(x, w, rows_per_program=0)


def test_width_limits_point_to_the_other_variant():
    x = torch.zeros(1, T.ROW_MAX_COLS + 1, device=DEV)
    w = torch.ones(T.ROW_MAX_COLS + 1, device=DEV)
    with pytest.raises(InputError, match="triton.looped"):
        T.rmsnorm_row(x, w)
    with pytest.raises(InputError, match="triton.row"):
        T.rmsnorm_multirow(x[:, :T.MULTIROW_MAX_COLS + 1], w[:T.MULTIROW_MAX_COLS + 1])


def test_row_limit_is_the_widest_recorded_row_that_does_not_spill():
    from fusedrms import records

    recs = sorted(records.load("traffic_row_registers")["records"], key=lambda r: r["cols"])
    fits = [r["cols"] for r in recs if r["spills"] == 0]
    assert T.ROW_MAX_COLS == max(fits)
    wider = [r for r in recs if r["cols"] > T.ROW_MAX_COLS]
    assert wider and all(r["spills"] > 0 for r in wider), "the next recorded width must spill"
    row = registry.get("triton.row")  # verify and bench skip what the wrapper refuses
    assert row.supports(DEV.type, torch.float32, T.ROW_MAX_COLS)
    assert not row.supports(DEV.type, torch.float32, T.ROW_MAX_COLS + 1)
    wide = 2 * T.ROW_MAX_COLS
    with pytest.raises(InputError, match=f"at most {T.ROW_MAX_COLS} columns.*triton.looped"):
        T.rmsnorm_row(torch.zeros(1, wide, device=DEV), torch.ones(wide, device=DEV))


def test_registered():
    for name, fn in [("triton.row", T.rmsnorm_row), ("triton.looped", T.rmsnorm_looped),
                     ("triton.multirow", T.rmsnorm_multirow)]:
        impl = registry.get(name)
        assert impl.op == "rmsnorm" and impl.route == "triton" and impl.fn is fn
    assert registry.get("triton.row").max_cols == T.ROW_MAX_COLS
    assert registry.get("triton.looped").max_cols is None


def test_num_warps_rule():
    assert [T.num_warps_for(b) for b in (16, 1024, 2048, 4096, 8192, 65536)] == [4, 4, 4, 8, 16, 16]
    with pytest.raises(ValueError):
        T.num_warps_for(0)
    assert T.rows_per_program_for(16) == 64 and T.rows_per_program_for(4096) == 1


def test_bf16_truncate_and_census():
    one_and_a_bit = torch.tensor([1.0 + 2.0 ** -8 + 2.0 ** -12, -1.0 - 2.0 ** -7 * 0.75])
    assert ch04.bf16_truncate(one_and_a_bit).tolist() == [1.0, -1.0]
    nearest = one_and_a_bit.to(torch.bfloat16)
    assert nearest.tolist() == [1.0078125, -1.0078125]
    c = ch04.bf16_rounding_census(ch04.bf16_truncate(one_and_a_bit), one_and_a_bit)
    assert c["equal_to_truncation"] == 2 and c["one_step_from_nearest_even"] == 2
    assert c["nearest_and_truncation_differ"] == 2
    with pytest.raises(ValueError):
        ch04.bf16_rounding_census(one_and_a_bit, one_and_a_bit)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("eps", [0.0, 1e-5])
def test_bf16_subnormals_are_read_exactly(variant, eps):
    """Issue 26: the interpreter read bf16 values below 1.18e-38 by up to 8x off (2.59e-21 for
    2.14e-20 in row 0)."""
    x = torch.tensor([[4e-19, 3e-39, -1.5e-39, 9.2e-41], [1e-39, -2e-39, 5e-40, 1e-38]],
                     dtype=torch.bfloat16, device=DEV)
    w = torch.ones(4, dtype=torch.bfloat16, device=DEV)
    y = VARIANTS[variant](x, w, eps)
    expected = reference.rmsnorm(x, w, eps, accum=torch.float64)
    if eps == 0.0:  # row 1's mean square underflows fp32: loud
        assert y[1].isnan().all()
        y, expected = y[:1], expected[:1]
    assert checks.allclose(y, expected)


@pytest.mark.skipif(ENV.on_gpu, reason="the interpreter's cast, only on the CPU path")
def test_interpreter_truncates_bf16_casts():
    x, w = _inputs(33, 257, torch.bfloat16)
    exact = reference.rmsnorm(x, w, accum=torch.float32, out_dtype=torch.float32)
    c = ch04.bf16_rounding_census(T.rmsnorm_row(x, w), exact)
    # if a later triton rounds to nearest even, this fails and chapter 4 needs rewording
    assert c["equal_to_truncation"] > 0.95 * c["elements"]
    assert c["one_step_from_nearest_even"] > 0.3 * c["elements"]
    assert c["more_than_one_step_from_nearest_even"] == 0


def test_assembly_summary_reads_ptx():
    ptx = """
    ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    @%p1 ld.global.b32 { %r5 }, [ %rd2 + 0 ];
    shfl.sync.bfly.b32 %r6, %r7, 16, 31, -1;
    shfl.sync.bfly.b32 %r8, %r9, 8, 31, -1;
    bar.sync 0;
    st.shared.b32 [%r10], %r11;
    rsqrt.approx.ftz.f32 %f1, %f2;
    st.global.v4.b32 [ %rd3 + 0 ], { %r1, %r2, %r3, %r4 };
    """
    s = ch04.assembly_summary(ptx, "ptx")
    assert s["widest_global_load_vector"] == 4 and s["global_loads"] == 2
    hinted = ch04.assembly_summary("ld.global.L1::evict_last.v2.b32 { %r1, %r2 }, [ %rd1 + 0 ];", "ptx")
    assert hinted["widest_global_load_vector"] == 2
    assert s["butterfly_shuffles"] == 2 and s["barriers"] == 1 and s["rsqrt"] == 1
    assert s["global_stores"] == 1 and s["shared_stores"] == 1
    commented = ch04.assembly_summary("// %bb.0: // %__nv_rsqrtf.exit\nrsqrt.approx.ftz.f32 %f1, %f2;", "ptx")
    assert commented["rsqrt"] == 1
    assert "__nv_rsqrtf" not in ch04.assembly_excerpt("// %__nv_rsqrtf.exit\nrsqrt.approx.f32 %f1;", "ptx")
    amd = ch04.assembly_summary("global_load_dwordx4 v[0:3]\nds_swizzle_b32\ns_barrier\n", "amdgcn")
    assert amd["global_loads"] == 1 and amd["cross_lane_ops"] == 1


def test_bytes_moved():
    assert T.bytes_moved(1024, 4096, torch.float32) == 2 * 1024 * 4096 * 4 + 4096 * 4


def test_cli_checks_on_this_machine(capsys):
    assert T.main(["--version", "all", "--rows", "3", "--cols", "13"]) == 0
    out = capsys.readouterr().out
    for name in ("triton.row", "triton.looped", "triton.multirow"):
        assert name in out
    assert out.count("PASS") == 3
    if not ENV.on_gpu:
        assert "checking correctness only" in out


def test_cli_skips_row_when_too_wide(capsys):
    assert T.main(["--version", "triton.row", "--rows", "1", "--cols", str(T.ROW_MAX_COLS + 1)]) == 0
    assert "use looped" in capsys.readouterr().out


@pytest.mark.parametrize("argv,match", [
    (["--version", "fast"], "--version must be one of"),
    (["--rows", "-1"], "--rows: must be a whole number >= 1"),
    (["--rows", "0", "--cols", "8"], "--rows: must be a whole number >= 1"),
    (["--cols", "0"], "--cols: must be a whole number >= 1"),
    (["--dtype", "int8"], "--dtype: unknown dtype"),
    (["--num-warps", "3"], "--num-warps: invalid choice"),
    (["--rows", "many"], "--rows: expected a whole number"),
    (["--seed", "99999999999999999999"], "--seed: must be a whole number from 0"),
    (["--eps", "-1"], "--eps: eps must be a finite number >= 0"),
    (["--eps", "nan"], "--eps: must be a finite number"),
    (["--rows", "100000", "--cols", "100000"], "elements; at most"),
])
def test_cli_bad_arguments(argv, match, capsys):
    with pytest.raises(SystemExit) as e:
        T.main(argv)
    assert e.value.code == 2
    assert match in capsys.readouterr().err


@pytest.mark.skipif(ENV.on_gpu, reason="the interpreter's limit; a GPU has the memory limit")
@pytest.mark.parametrize("rows,cols,match", [
    (1, 268435456, "at most 4,194,304 columns"),  # issue 26: ran for minutes
    (16384, 1, "--rows 1024 or fewer"),  # narrow rows cost as much: one program each
    (2, 4096 * 1024, "--rows 1 or fewer"),
])
def test_cli_refuses_sizes_the_interpreter_would_take_minutes_on(rows, cols, match, capsys):
    with pytest.raises(SystemExit) as e:
        T.main(["--rows", str(rows), "--cols", str(cols)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "usage:" in err and match in err and "10 ms" in err


def test_cli_size_limits_fit_the_interpreter_and_the_device():
    assert T.cli_size_problem(1024, 4096, torch.float32, on_gpu=False) == ""  # the default fits
    assert T.cli_size_problem(1, 4096 * 1024, torch.float32, on_gpu=False) == ""
    assert "1,025 rows" in T.cli_size_problem(1025, 4096, torch.float32, on_gpu=False)
    gib = 1 << 30
    # fp32 on a GPU: 32 + 6 x 4 = 56 bytes per element on the device, 72 + 2 x 4 on the host
    fits = dict(device_free=56 * (1 << 28), host_free=80 * (1 << 28))
    assert T.cli_size_problem(1, 1 << 28, torch.float32, on_gpu=True, **fits) == ""
    short = T.cli_size_problem(1, 1 << 28, torch.float32, True, device_free=8 * gib,
                               host_free=64 * gib)
    assert "14.0 GiB on the GPU" in short and "8.0 GiB is free" in short
    host = T.cli_size_problem(1, 1 << 28, torch.bfloat16, True, device_free=80 * gib,
                              host_free=4 * gib)
    assert "19.0 GiB of host memory" in host


def test_launch_configurations_past_triton_s_largest_block_are_refused():
    """Issue 26: they passed validation and failed deep inside Triton."""
    x, w = _inputs(2, 4096)
    with pytest.raises(InputError, match="chunk=2097152 .* at most 1048576"):
        T.rmsnorm_looped(x, w, chunk=2 ** 21)
    with pytest.raises(InputError, match="rows_per_program=512 .* at most 256"):
        T.rmsnorm_multirow(x, w, rows_per_program=512)
    with pytest.raises(InputError, match="rows_per_program"):  # refused before the empty return
        T.rmsnorm_multirow(x[:0], w, rows_per_program=512)
    x, w = _inputs(3, 13)
    _check(T.rmsnorm_looped(x, w, chunk=2 ** 20), x, w)  # the largest block still runs


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_only_wrappers_refuse_inputs_that_require_grad(variant):
    """Issue 26: the output had no grad_fn, so backward() silently skipped the norm."""
    x, w = _inputs(3, 13)
    for xg, wg, name in ((x.clone().requires_grad_(), w, "x"),
                         (x, torch.nn.Parameter(w.clone()), "w")):
        with pytest.raises(InputError, match=f"{name} requires grad.*rmsnorm_backward.rmsnorm"):
            VARIANTS[variant](xg, wg)
        with torch.no_grad():  # forward only, as asked
            _check(VARIANTS[variant](xg, wg), x, w)
    _check(VARIANTS[variant](x.clone().requires_grad_().detach(), w), x, w)


# ---- on the GPU (skipped elsewhere) ----

@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("rows,cols,dtype", [(1024, 4096, torch.float32), (4096, 8192, torch.bfloat16),
                                             (33, 257, torch.float16), (3, 13, torch.bfloat16)])
def test_gpu_variants(variant, rows, cols, dtype):
    if variant == "multirow" and cols > T.MULTIROW_MAX_COLS:
        pytest.skip("multirow is for narrow rows")
    x, w = _inputs(rows, cols, dtype)
    _check(VARIANTS[variant](x, w), x, w)


@pytest.mark.gpu
def test_gpu_looped_wide_rows():
    x, w = _inputs(8, 100_000)
    _check(T.rmsnorm_looped(x, w), x, w)


@pytest.mark.gpu
def test_gpu_rounds_bf16_to_nearest_even():
    x, w = _inputs(256, 4096, torch.bfloat16)
    exact = reference.rmsnorm(x, w, accum=torch.float32, out_dtype=torch.float32)
    c = ch04.bf16_rounding_census(T.rmsnorm_row(x, w), exact)
    assert c["equal_to_nearest_even"] > 0.99 * c["elements"]
    assert c["more_than_one_step_from_nearest_even"] == 0


@pytest.mark.gpu
def test_gpu_compiled_kernel_and_timing():
    k = ch04.row_kernel_compiled(4096, torch.float32)
    kind = "amdgcn" if ENV.backend == "rocm" else "ptx"
    s = ch04.assembly_summary(k.asm[kind], kind)
    assert s["global_loads"] > 0 and s["global_stores"] > 0
    times = ch04.measure_num_warps(256, 4096, torch.float32, warps=(4, 8))
    assert set(times) == {4, 8} and all(0 < t < 1e5 and math.isfinite(t) for t in times.values())


def test_assembly_excerpt_numbers_the_landmarks():
    asm = "\n".join(["mov.u32 %r0, 0;", "ld.global.v4.b32 {%r1,%r2,%r3,%r4}, [%rd1];", "add.f32 x;",
                     "add.f32 y;", "shfl.sync.bfly.b32 %r6, %r7, 16, 31, -1;", "st.global.b32 [%rd3], %r1;"])
    text = ch04.assembly_excerpt(asm, "ptx")
    assert "    2  ld.global.v4" in text and "    5  shfl.sync.bfly" in text and "..." in text
    assert "mov.u32" not in text


def _write_record(tmp_path, monkeypatch, name, recs):
    from fusedrms import records

    monkeypatch.setattr(records, "DATA_DIR", tmp_path)
    records.write(tmp_path / "h200" / f"{name}.json", recs)
    return records.load(name)


def test_summarize_warps_from_a_recorded_file(tmp_path, monkeypatch):
    recs = [dict(rows=4096, cols=c, dtype="bfloat16", num_warps=nw, median_us=us, gbps=1000.0 / us)
            for c, times in [(1024, {4: 10.0, 8: 12.0, 16: 15.0}), (8192, {4: 40.0, 8: 30.0, 16: 31.0})]
            for nw, us in times.items()]
    recs += [{"rows": "x"}, {"cols": 1}]  # malformed records are skipped
    doc = _write_record(tmp_path, monkeypatch, "triton_warps", recs)
    s = ch04.summarize_warps(doc["records"], 0.05)
    assert [r["shape"] for r in s["rows"]] == ["4096x1024", "4096x8192"]
    assert [r["fastest"] for r in s["rows"]] == [4, 8] and s["winners"] == [4, 8]
    # the rule picks 4 warps at 1024 (fastest) and 16 at 8192 (31.0 <= 1.05 * 30.0)
    assert [r["rule ties fastest"] for r in s["rows"]] == ["yes", "yes"] and s["rule_hits"] == 2
    assert s["rows"][0]["8 warps us"] == 12.0 and s["misses"] == []
    assert ch04.summarize_warps(doc["records"], 0.02)["rule_hits"] == 1  # 31.0 > 1.02 * 30.0
    assert ch04.summarize_warps([]) == {"rows": [], "winners": [], "rule_hits": 0, "misses": []}


def test_summarize_warps_names_the_rule_s_misses():
    recs = [dict(rows=1024, cols=4096, dtype="float32", num_warps=nw, median_us=us,
                 min_us=us * 0.99, max_us=us * 1.02) for nw, us in {4: 8.8, 8: 10.1, 16: 9.5}.items()]
    s = ch04.summarize_warps(recs, 0.05)
    assert s["misses"] == [{"shape": "1024x4096", "dtype": "float32", "rule": 8, "rule_us": 10.1,
                            "fastest": 4, "fastest_us": 8.8}]
    assert s["rule_hits"] == 0


def test_spill_widths_from_chapter_2_s_register_records():
    recs = [dict(cols=32768, registers_per_thread=128, spills=0),
            dict(cols=65536, registers_per_thread=128, spills=90),
            dict(cols=4096, registers_per_thread=36, spills=None), {"cols": "x"}]
    s = ch04.spill_widths(recs)
    assert s["widest_clean"] == {"cols": 32768, "registers": 128, "spills": 0}
    assert s["first_spill"] == {"cols": 65536, "registers": 128, "spills": 90}
    assert ch04.spill_widths([]) == {"widest_clean": None, "first_spill": None}


def test_side_by_side_keeps_shared_shapes(tmp_path, monkeypatch):
    hip = _write_record(tmp_path, monkeypatch, "hip_ladder", [  # hip.ladder's field names
        dict(kind="ladder", name="hip.serial", rows=1024, cols=4096, dtype="float32", median_us=900.0),
        dict(kind="ladder", name="hip.block", rows=1024, cols=4096, dtype="float32", median_us=20.0,
             GBps=1600.0),
        dict(kind="block_size", name="hip.block", block_size=128, rows=1024, cols=4096,
             dtype="float32", median_us=25.0),
        dict(kind="ladder", name="block", rows=8, cols=8, dtype="float32", median_us=3.0),
        {"name": "hip.shuffle", "error": "no median"}])
    tri = {"records": [dict(rows=1024, cols=4096, dtype="float32", num_warps=8, median_us=13.0,
                            gbps=2500.0)]}
    out = ch04.side_by_side([(hip, "hip"), (tri, "triton"), (None, "triton")])
    assert out["shared"] == [(1024, 4096, "float32")]
    assert [r["variant"] for r in out["rows"]] == ["triton.row, 8 warps", "hip.block",
                                                   "hip.block (block 128)", "hip.serial"]
    assert out["rows"][1]["GB/s"] == 1600.0
    alone = ch04.side_by_side([(hip, "hip")])  # nothing shared: the seed shape only
    assert alone["shared"] == [] and len(alone["rows"]) == 3
    assert {(r["rows"], r["cols"]) for r in alone["rows"]} == {(1024, 4096)}
    other = ch04.side_by_side([(hip, "hip")], fallback_shape=(8, 8, "float32"))
    assert [r["variant"] for r in other["rows"]] == ["hip.block"]
    # hip_ladder also times triton.row: it counts as the triton route, not as hip
    both = ch04.side_by_side([({"records": [dict(name="triton.row", rows=1, cols=2, dtype="float32",
                                               median_us=5.0),
                                          dict(name="hip.block", rows=1, cols=2, dtype="float32",
                                               median_us=6.0)]}, "hip")])
    assert both["shared"] == [(1, 2, "float32")]


def test_max_cols_table_matches_the_registry():
    for name, limit in T.MAX_COLS.items():
        assert registry.get(name).max_cols == limit


# ---------------------------------------------------------------- issue 17: loud, never wrong

@pytest.mark.parametrize("name", list(VARIANTS))
def test_an_overflowing_sum_of_squares_is_nan_not_zero(name):
    """rmsnorm_row(torch.full((1, 4096), 1e18), ones) returned 0 where the answer is 1."""
    x = torch.full((2, 4096), 1e18, device=DEV)
    x[1] = 1e17  # squares 1e34, sum 4e37: still in range, so computed
    y = VARIANTS[name](x, torch.ones(4096, device=DEV))
    assert torch.isnan(y[0]).all()
    assert torch.allclose(y[1].cpu(), torch.ones(4096), rtol=1e-5)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_eps_zero_with_a_row_below_fp32_range_is_nan_not_inf(name):
    """eps = 0 and rows of 1e-25 gave +-inf; now the documented loud NaN (or the exact answer)."""
    x = torch.full((3, 8), 1e-25, device=DEV)
    x[1] = -3.0
    x[2] = 0.0
    y = VARIANTS[name](x, torch.ones(8, device=DEV), 0.0)
    assert torch.isnan(y[0]).all() and torch.isnan(y[2]).all()
    assert torch.allclose(y[1].cpu(), -torch.ones(8))
    assert torch.allclose(VARIANTS[name](x[:1], torch.ones(8, device=DEV), 1e-5).cpu(),
                          torch.full((1, 8), 1e-25 / math.sqrt(1e-5)), rtol=1e-5)


@pytest.mark.gpu
def test_gpu_overflow_and_eps_zero_are_loud_on_every_variant():
    for name in VARIANTS:
        test_an_overflowing_sum_of_squares_is_nan_not_zero(name)
        test_eps_zero_with_a_row_below_fp32_range_is_nan_not_inf(name)


@pytest.mark.gpu
def test_num_warps_can_change_the_last_bits_not_what_is_computed():
    """Chapter 4: num_warps splits the row's sum differently, so the additions happen in another
    order. Every setting is correct; on the H200 they disagree in the last bits of millions of
    fp32 outputs."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4096, 4096, device="cuda", generator=g)
    w = torch.randn(4096, device="cuda", generator=g)
    expected = reference.rmsnorm(x, w, 1e-5, accum=torch.float64)
    ys = {nw: T.rmsnorm_row(x, w, 1e-5, num_warps=nw) for nw in (4, 8, 16)}
    for nw, y in ys.items():
        assert checks.allclose(y, expected).ok, nw
    assert any(not torch.equal(ys[4], ys[nw]) for nw in (8, 16))
