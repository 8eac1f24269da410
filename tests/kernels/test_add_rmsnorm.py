"""The capstone kernels: both ops against the float64 references, every launch path, validation,
in-place mode, the bf16 rounding of the stored residual, and the configuration choice."""
import itertools
import json

import pytest
import torch
import triton

from fusedrms.kernels import add_rmsnorm as A
from fusedrms import checks, env, reference, registry, tuning
from fusedrms.validation import InputError

ENV = env.current()
DEV = ENV.device
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# interpreter default, one row per program, a persistent grid that loops over tiles, pipelined;
# the two-pass design in chunks (whole-row for 13 columns; 3 to 64 chunks, the last one partial);
# a row split over programs (5 or 17 segments at 257 columns, 32 or 128 at 2048)
CONFIGS = (None, A.LaunchConfig(1, 4, 1, None), A.LaunchConfig(2, 4, 2, 1),
           A.LaunchConfig(8, 2, 3, 2), A.LaunchConfig(1, 4, 1, None, 128),
           A.LaunchConfig(2, 2, 1, 2, 32), A.LaunchConfig(1, 4, segment=64),
           A.LaunchConfig(1, 2, segment=16), A.LaunchConfig(1, 4, programs_per_sm=2, segment=32))


def inputs(rows, cols, dtype, device=DEV, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g).to(dtype).to(device)
    r = torch.randn(rows, cols, generator=g).to(dtype).to(device)
    w = torch.randn(cols, generator=g).to(dtype).to(device)
    return x, r, w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 13), (33, 257), (1, 1), (5, 2048)])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "default" if c is None else c.label())
def test_both_ops_match_float64_references(shape, dtype, config):
    x, r, w = inputs(*shape, dtype)
    y = A.add_rmsnorm(x, r, w, 1e-5, config=config)
    assert checks.allclose(y, reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64))
    y2, s = A.add_rmsnorm_residual(x, r, w, 1e-5, config=config)
    ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, 1e-5, accum=torch.float64)
    assert checks.equal(s, ref_s)  # the stored residual is x + r rounded once, bit for bit
    assert checks.allclose(y2, ref_y)
    assert y.dtype == y2.dtype == s.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_chunked_design_on_a_partial_last_chunk(dtype):
    x, r, w = inputs(3, 13, dtype)  # chunks of 4: 4 + 4 + 4 + 1 columns
    cfg = A.LaunchConfig(2, 1, 1, 1, 4)
    ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, 1e-5, accum=torch.float64)
    y, s = A.add_rmsnorm_residual(x, r, w, config=cfg)
    assert checks.equal(s, ref_s) and checks.allclose(y, ref_y)
    assert checks.allclose(A.add_rmsnorm(x, r, w, config=cfg),
                           reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64))


def test_residual_is_rounded_to_nearest_even_not_truncated():
    # 1 + 2^-7 + 2^-8 lies halfway between two bf16 values; nearest-even rounds up, truncation down
    x = torch.full((2, 16), 1.0 + 2 ** -7, dtype=torch.bfloat16, device=DEV)
    r = torch.full((2, 16), 2 ** -8, dtype=torch.bfloat16, device=DEV)
    w = torch.ones(16, dtype=torch.bfloat16, device=DEV)
    _, s = A.add_rmsnorm_residual(x, r, w)
    assert torch.all(s.float() == 1.015625)


def test_y_uses_the_sum_in_fp32_or_as_stored():
    # fp16: x + r is not representable; add_rmsnorm keeps it in fp32, the residual op rounds it first
    x = torch.tensor([[1.0, 2.0 ** -11, -1.0, 3.0]], dtype=torch.float16, device=DEV)
    r = torch.tensor([[2.0 ** -11, 1.0, 1.0, 0.0]], dtype=torch.float16, device=DEV)
    w = torch.ones(4, dtype=torch.float16, device=DEV)
    y = A.add_rmsnorm(x, r, w)
    y2, s = A.add_rmsnorm_residual(x, r, w)
    assert torch.equal(y, reference.add_rmsnorm(x, r, w))
    assert torch.equal(s, (x.float() + r.float()).half())
    assert checks.allclose(y2, reference.add_rmsnorm_residual(x, r, w, accum=torch.float64)[0])


def test_leading_dims_strides_and_empty():
    x, r, w = inputs(2 * 3, 40, torch.float32)
    x3, r3 = x.reshape(2, 3, 40), r.reshape(2, 3, 40)
    y = A.add_rmsnorm(x3, r3, w)
    assert y.shape == (2, 3, 40)
    assert checks.allclose(y, reference.add_rmsnorm(x3, r3, w, accum=torch.float64))
    big, rbig, _ = inputs(40, 12, torch.float32)
    xt, rt = big.t(), rbig.t()  # (12, 40), column stride 12
    y, s = A.add_rmsnorm_residual(xt, rt, w)
    assert checks.allclose(y, reference.add_rmsnorm_residual(xt, rt, w, accum=torch.float64)[0])
    xs, rs = x[:, ::2], r[:, ::2]  # every other column
    assert checks.allclose(A.add_rmsnorm(xs, rs, w[:20]),
                           reference.add_rmsnorm(xs, rs, w[:20], accum=torch.float64))
    empty = torch.empty(0, 40, device=DEV)
    assert A.add_rmsnorm(empty, empty.clone(), w).shape == (0, 40)


def test_special_values():
    x, r, w = inputs(4, 64, torch.float16)
    x[1, 5] = float("nan")
    x[2] = 300.0  # squares overflow fp16; fp32 accumulation does not
    r[2] = 0.0
    y = A.add_rmsnorm(x, r, w)
    assert torch.isnan(y[1]).all() and not torch.isnan(y[[0, 2, 3]]).any()
    ok = [0, 2, 3]
    assert checks.allclose(y[ok], reference.add_rmsnorm(x[ok], r[ok], w, accum=torch.float64))
    zeros = torch.zeros(3, 8, device=DEV)
    assert torch.equal(A.add_rmsnorm(zeros, zeros, torch.ones(8, device=DEV)), zeros)


def test_in_place_writes_x_and_residual():
    x, r, w = inputs(9, 100, torch.bfloat16)
    ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, accum=torch.float64)
    expected_y, expected_s = A.add_rmsnorm_residual(x, r, w)
    y, s = A.add_rmsnorm_residual(x, r, w, in_place=True)
    assert y is x and s is r
    assert torch.equal(x, expected_y) and torch.equal(r, expected_s)
    assert checks.equal(r, ref_s) and checks.allclose(x, ref_y)


def test_in_place_refuses_what_it_cannot_update():
    x, r, w = inputs(40, 12, torch.float32)
    w40 = torch.ones(40, device=DEV)
    with pytest.raises(InputError, match="not contiguous"):
        A.add_rmsnorm_residual(x.t(), r.t().contiguous(), w40, in_place=True)
    with pytest.raises(InputError, match="both written but share memory"):
        A.add_rmsnorm_residual(x, x, w, in_place=True)


def test_in_place_refuses_any_overlap_not_just_equal_pointers():
    """Issue 17: overlapping views gave a wrong sum, a weight inside x wrong rows."""
    buf = torch.randn(10, 13, device=DEV)
    w = torch.ones(13, device=DEV)
    with pytest.raises(InputError, match="share memory"):
        A.add_rmsnorm_residual(buf[:9], buf[1:], w, in_place=True)
    x, r = torch.randn(4, 13, device=DEV), torch.randn(4, 13, device=DEV)
    with pytest.raises(InputError, match="shares memory with w"):
        A.add_rmsnorm_residual(x, r, x[0], in_place=True)
    before = buf.clone()
    y, s = A.add_rmsnorm_residual(buf[:9], buf[1:], w)  # out of place: overlapping inputs are fine
    assert torch.equal(buf, before)
    ref_y, ref_s = reference.add_rmsnorm_residual(buf[:9], buf[1:], w, accum=torch.float64)
    assert checks.equal(s, ref_s) and checks.allclose(y, ref_y)


@pytest.mark.parametrize("flag", ["no", 1, None])
def test_in_place_must_be_a_boolean(flag):
    x, r, w = inputs(2, 8, torch.float32)
    with pytest.raises(InputError, match="in_place must be True or False"):
        A.add_rmsnorm_residual(x, r, w, in_place=flag)
    assert torch.equal(x, inputs(2, 8, torch.float32)[0])  # nothing was written


@pytest.mark.parametrize("config", CONFIGS)
def test_an_overflowed_row_is_nan_on_every_launch_path(config):
    """The fp32 sum of squares of row 0 overflows: NaN, never zeros (chunked/two-pass too)."""
    x = torch.randn(3, 257, device=DEV)
    x[0] = 1e19
    x[2, 5] = float("inf")
    r, w = torch.zeros_like(x), torch.ones(257, device=DEV)
    for y in (A.add_rmsnorm(x, r, w, config=config), *A.add_rmsnorm_residual(x, r, w, config=config)[:1]):
        assert torch.isnan(y[[0, 2]]).all() and torch.isfinite(y[1]).all()
        assert checks.allclose(y[1:2], reference.add_rmsnorm(x[1:2], r[1:2], w, accum=torch.float64))


@pytest.mark.parametrize("call,match", [
    (lambda x, r, w: A.add_rmsnorm(x.double(), r.double(), w), "dtype float64"),
    (lambda x, r, w: A.add_rmsnorm(x, r[:, :-1], w), "residual has shape"),
    (lambda x, r, w: A.add_rmsnorm(x, r.half(), w), "residual is float16"),
    (lambda x, r, w: A.add_rmsnorm(x, r, w[:-1]), "one weight per column"),
    (lambda x, r, w: A.add_rmsnorm(x, r, w, eps=-1.0), "eps must be"),
    (lambda x, r, w: A.add_rmsnorm([1.0], r, w), "must be a torch.Tensor"),
    (lambda x, r, w: A.add_rmsnorm(x, r, w, config={"warps": 4}), "chunk, segment"),
    (lambda x, r, w: A.add_rmsnorm(x, r, w, config=A.LaunchConfig(3, 4)), "power of two"),
    (lambda x, r, w: A.add_rmsnorm(x, r, w, config="fast"), "config must be"),
    (lambda x, r, w: A.add_rmsnorm_residual(x, r, w, config={"num_warps": 64}), "num_warps"),
    # a tensor with no storage has no address for the repeated-call key: the full path explains
    (lambda x, r, w: A.add_rmsnorm(x.to_sparse(), r, w), "sparse_coo tensor"),
    (lambda x, r, w: A.add_rmsnorm_residual(x, r.to_sparse(), w, in_place=True), "sparse_coo"),
])
def test_validation_messages(call, match):
    x, r, w = inputs(3, 8, torch.float32)
    with pytest.raises(InputError, match=match):
        call(x, r, w)


def test_width_limit_is_explained():
    x = torch.zeros(1, A.MAX_COLS + 1, dtype=torch.float16, device=DEV)
    with pytest.raises(InputError, match=f"at most {A.MAX_COLS} columns"):
        A.add_rmsnorm(x, x.clone(), torch.ones(A.MAX_COLS + 1, dtype=torch.float16, device=DEV))


def test_registered_under_the_registry_ops():
    fused, residual = registry.get("capstone.fused"), registry.get("capstone.fused_residual")
    assert (fused.op, residual.op) == ("add_rmsnorm", "add_rmsnorm_residual")
    assert fused.fn is A.add_rmsnorm and residual.fn is A.add_rmsnorm_residual
    assert fused.max_cols == residual.max_cols == A.MAX_COLS


# ---------------------------------------------------------------- configurations

def test_block_is_never_a_tuned_parameter():
    for cols in (13, 2048, 5000, 16384):
        for dtype in DTYPES:
            for cfg in A.candidate_configs(cols, dtype) + [A.heuristic_config(cols, dtype)]:
                assert "BLOCK" not in cfg.as_dict() and "block" not in cfg.as_dict()


@pytest.mark.parametrize("cols", [2048, 4096, 8192, 16384])
@pytest.mark.parametrize("dtype", DTYPES)
def test_candidates_respect_registers_and_vectors(cols, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    cands = A.candidate_configs(cols, dtype)
    assert cands and len(set(cands)) == len(cands)
    for c in cands:
        threads = 32 * c.num_warps
        per_thread = c.rows_per_program * cols // threads
        assert 1 <= c.num_warps <= 32
        assert per_thread <= 32  # fp32 values per thread per tensor
        assert (per_thread * size) % 16 == 0  # whole 16-byte vectors


@pytest.mark.parametrize("cols", [2048, 4096, 8192, 16384])
@pytest.mark.parametrize("dtype", DTYPES)
def test_chunked_candidates_are_narrower_than_the_row(cols, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    cands = A.chunked_candidates(cols, dtype)
    assert (cands == []) == (cols < 4096) and len(set(cands)) == len(cands)
    for c in cands:
        assert c.chunk < cols and c.rows_per_program == 1 and c.programs_per_sm is None
        assert (c.chunk // (32 * c.num_warps) * size) in (16, 32)  # bytes per thread per tensor
        assert "chunks of" in c.label()
    for v in A.persistent_variants(cands[0]) if cands else []:
        assert v.chunk == cands[0].chunk and v.num_stages == 1


def test_chunk_must_be_a_power_of_two():
    with pytest.raises(InputError, match="chunk"):
        A.LaunchConfig(1, 4, 1, None, 1000)


def test_heuristic_values():
    assert A.heuristic_config(2048, torch.bfloat16) == A.LaunchConfig(4, 16, 1, None)
    assert A.heuristic_config(4096, torch.bfloat16) == A.LaunchConfig(2, 16, 1, None)
    assert A.heuristic_config(16384, torch.float32) == A.LaunchConfig(1, 16, 1, None)
    assert A.heuristic_config(32768, torch.bfloat16) == A.LaunchConfig(1, 32, 1, None)
    assert A.heuristic_config(13, torch.float32).rows_per_program == 8
    # past what registers hold: two passes over column chunks
    assert A.heuristic_config(A.WHOLE_ROW_MAX_COLS + 1, torch.float32) == A.TWO_PASS_CONFIG
    assert A.heuristic_config(A.MAX_COLS, torch.bfloat16) == A.TWO_PASS_CONFIG


def test_rows_wider_than_the_registers_hold_split_in_small_batches_else_exchange_or_two_passes():
    for dtype in (torch.bfloat16, torch.float32):
        for write_sum in (False, True):
            table = A.heuristic_config(65536, dtype)
            for rows in (1, 66):  # at most half of 132 SMs: a row split over programs
                got, rule = A.batch_config(table, rows, 65536, 132, dtype, write_sum=write_sum)
                assert got == A.SPLIT_CONFIG and got.segment < 65536 and rule.startswith("split")
            for rows in (67, 1000, 10**5):
                got = A.batch_config(table, rows, 65536, 132, dtype, write_sum=write_sum)[0]
                if A.takes_exchange(rows, 65536, 132, dtype, write_sum=write_sum):
                    assert got == A.EXCHANGE_CONFIG
                else:  # the residual-writing op in two-byte types, or fp32 near one row per SM
                    assert write_sum and got == A.TWO_PASS_CONFIG and got.chunk < 65536
    # the fused op exchanges from 67 rows; the residual-writing op keeps two passes in bf16
    assert A.batch_config(A.TWO_PASS_CONFIG, 67, 65536, 132, torch.bfloat16,
                          write_sum=False)[0] == A.EXCHANGE_CONFIG
    assert A.batch_config(A.TWO_PASS_CONFIG, 10**5, 65536, 132, torch.bfloat16,
                          write_sum=True)[0] == A.TWO_PASS_CONFIG
    # rows held whole are never split
    assert A.batch_config(A.LaunchConfig(1, 32), 1, 32768, 132, torch.bfloat16,
                          write_sum=False)[0].segment is None


def test_only_the_residual_writing_op_takes_two_passes_on_a_gpu():
    """Past what registers hold, the fused op splits or exchanges at every batch: every such row
    is 128 KB or more. The residual-writing op keeps a tile grid of 32-warp programs (one fits an
    SM) where it does not exchange."""
    assert A.TWO_PASS_CONFIG.programs_per_sm is None and A.TWO_PASS_CONFIG.num_warps == 32
    for cols in (A.WHOLE_ROW_MAX_COLS + 1, 40000, A.MAX_COLS):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for rows in (1, 66, 67, 132, 264, 1000, 10**5):
                got, _ = A.batch_config(A.TWO_PASS_CONFIG, rows, cols, 132, dtype,
                                        write_sum=False)
                assert got in (A.SPLIT_CONFIG, A.EXCHANGE_CONFIG), (rows, cols, dtype)
    assert A.batch_config(A.TWO_PASS_CONFIG, 1000, 65536, 132, torch.bfloat16,
                          write_sum=True) == (A.TWO_PASS_CONFIG, None)
    assert A.batch_config(A.LaunchConfig(1, 16), 1000, 65536, 132, torch.bfloat16,
                          write_sum=True)[1].startswith("two-pass rule")
    with pytest.raises(ValueError, match="wider than one program holds"):
        A.large_batch_config(A.WHOLE_ROW_MAX_COLS + 1, torch.bfloat16, write_sum=False)


def test_a_row_of_max_cols_is_computed_right_by_both_designs():
    """The interpreter's one configuration keeps the row whole; the two-pass launch (on a GPU the
    residual-writing op's in two-byte types) walks it in chunks: both give the reference at the
    widest row the capstone takes, and the fused op the residual op's y."""
    x, r, w = inputs(2, A.MAX_COLS, torch.float32)
    ref = reference.add_rmsnorm(x, r, w, accum=torch.float64)
    assert checks.allclose(A.add_rmsnorm(x, r, w), ref)
    y, s = A.add_rmsnorm_residual(x, r, w, config=A.TWO_PASS_CONFIG)
    ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, accum=torch.float64)
    assert checks.equal(s, ref_s) and checks.allclose(y, ref_y)
    assert checks.equal(A.add_rmsnorm(x, r, w, config=A.TWO_PASS_CONFIG), y)


def test_small_grids_get_fewer_rows_per_program():
    assert A.effective_rows_per_program(8, 16384, 132) == 8
    assert A.effective_rows_per_program(8, 256, 132) == 1  # 256 rows: every SM needs a program
    assert A.effective_rows_per_program(4, 1, 132) == 1
    assert A.grid_size(A.LaunchConfig(4, 8, 1, None), 16384, 132) == (4, 4096)
    assert A.grid_size(A.LaunchConfig(4, 8, 2, 2), 16384, 132) == (4, 264)
    assert A.grid_size(A.LaunchConfig(4, 8, 2, 2), 3, 1) == (4, 1)


def test_persistent_variants_fit_an_sm():
    for v in A.persistent_variants(A.LaunchConfig(2, 16, 1, None)):
        assert v.programs_per_sm * v.num_warps <= 64 and v.rows_per_program == 2


def _table_file(tmp_path, gpu="NVIDIA H200", extra_records=()):
    doc = {"provenance": {"gpu": gpu},
           "records": [{"cols": 4096, "dtype": "bfloat16", "rows_per_program": 2, "num_warps": 8,
                        "num_stages": 3, "programs_per_sm": 4},
                       {"cols": 2048, "dtype": "float32", "rows_per_program": 4, "num_warps": 16,
                        "num_stages": 1, "programs_per_sm": None},
                       {"cols": 16384, "dtype": "bfloat16", "rows_per_program": 1, "num_warps": 8,
                        "num_stages": 1, "programs_per_sm": 4, "chunk": 2048},
                       *extra_records]}
    path = tmp_path / "capstone_tuning.json"
    path.write_text(json.dumps(doc))
    return path


def test_tuning_table_loads_and_skips_malformed_rows(tmp_path):
    path = _table_file(tmp_path, extra_records=[{"cols": 8192, "dtype": "bfloat16"},
                                                {"cols": 1, "dtype": "float16",
                                                 "rows_per_program": 3, "num_warps": 4,
                                                 "num_stages": 1}])
    table = tuning.load("capstone", path)
    assert table["gpu"] == "NVIDIA H200"
    assert table["configs"] == {(4096, "bfloat16"): A.LaunchConfig(2, 8, 3, 4),
                                (2048, "float32"): A.LaunchConfig(4, 16, 1, None),
                                (16384, "bfloat16"): A.LaunchConfig(1, 8, 1, 4, 2048)}
    assert tuning.load("capstone", tmp_path / "missing.json")["configs"] == {}


def test_choose_config_prefers_the_table_on_its_gpu(tmp_path):
    table = tuning.load("capstone", _table_file(tmp_path))
    pick = lambda cols, dtype, gpu: A.choose_config(cols, dtype, table, gpu, on_gpu=True)
    cfg, source = pick(4096, torch.bfloat16, "NVIDIA H200")
    assert cfg == A.LaunchConfig(2, 8, 3, 4) and source.startswith("tuned")
    cfg, source = pick(3000, torch.bfloat16, "NVIDIA H200")  # same BLOCK (4096)
    assert cfg == A.LaunchConfig(2, 8, 3, 4) and "same BLOCK" in source
    cfg, source = pick(4096, torch.float16, "NVIDIA H200")  # no fp16 entry
    assert cfg == A.heuristic_config(4096, torch.float16) and source.startswith("heuristic")
    cfg, source = pick(4096, torch.bfloat16, "NVIDIA A100")  # another GPU
    assert source.startswith("heuristic")
    cfg, source = A.choose_config(4096, torch.bfloat16, table, "NVIDIA H200", on_gpu=False)
    assert cfg == A.INTERPRETER_CONFIG and source.startswith("interpreter")


# ---------------------------------------------------------------- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 4096), (1024, 4096), (257, 16384), (4096, 2048),
                                   (3, 32768), (3, 65536)])
def test_gpu_default_config(shape, dtype):
    x, r, w = inputs(*shape, dtype)
    assert checks.allclose(A.add_rmsnorm(x, r, w),
                           reference.add_rmsnorm(x, r, w, accum=torch.float64))
    y, s = A.add_rmsnorm_residual(x, r, w)
    ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, accum=torch.float64)
    assert checks.equal(s, ref_s) and checks.allclose(y, ref_y)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [2048])
def test_gpu_every_candidate_and_persistent_variant(cols):
    x, r, w = inputs(300, cols, torch.bfloat16)
    expected = reference.add_rmsnorm(x, r, w, accum=torch.float64)
    cands = A.candidate_configs(cols, torch.bfloat16)
    for cfg in cands + A.persistent_variants(cands[0]):
        assert checks.allclose(A.add_rmsnorm(x, r, w, config=cfg), expected), cfg.label()


@pytest.mark.gpu
def test_gpu_in_place_matches_out_of_place():
    x, r, w = inputs(777, 4096, torch.float16)
    y, s = A.add_rmsnorm_residual(x, r, w)
    A.add_rmsnorm_residual(x, r, w, in_place=True)
    assert torch.equal(x, y) and torch.equal(r, s)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [8192, 8189])
def test_gpu_every_chunked_candidate(cols):
    # 8189: the tuned width's configs on a width 3 short (partial last chunk, unaligned rows)
    x, r, w = inputs(300, cols, torch.bfloat16)
    ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, accum=torch.float64)
    expected = reference.add_rmsnorm(x, r, w, accum=torch.float64)
    cands = A.chunked_candidates(8192, torch.bfloat16)
    for cfg in cands + A.persistent_variants(cands[0]):
        assert checks.allclose(A.add_rmsnorm(x, r, w, config=cfg), expected), cfg.label()
        y, s = A.add_rmsnorm_residual(x, r, w, config=cfg)
        assert checks.equal(s, ref_s) and checks.allclose(y, ref_y), cfg.label()


@pytest.mark.gpu
def test_gpu_an_overflowed_row_is_nan_on_every_launch_path():
    for config in CONFIGS:
        test_an_overflowed_row_is_nan_on_every_launch_path(config)


# ---- repeated calls: the remembered plan skips nothing a reader relies on

def _inputs(rows=3, cols=40, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g).to(dtype),
            torch.randn(rows, cols, generator=g).to(dtype),
            (torch.rand(cols, generator=g) + 0.5).to(dtype))


def test_repeated_calls_use_a_plan_and_give_the_same_answer():
    from fusedrms.kernels import add_rmsnorm as A

    A.clear_plans()
    x, r, w = _inputs()
    first = A.add_rmsnorm(x, r, w)
    assert len(A._PLANS) == 1
    x2, r2, _ = _inputs(seed=1)
    again = A.add_rmsnorm(x2, r2, w)  # same key, new values
    assert len(A._PLANS) == 1
    assert torch.equal(again, A.add_rmsnorm(x2, r2, w, config=A.INTERPRETER_CONFIG))
    y, s = A.add_rmsnorm_residual(x, r, w)
    y2, s2 = A.add_rmsnorm_residual(x, r, w)
    assert torch.equal(y, y2) and torch.equal(s, s2) and torch.equal(y, first)
    xi, ri = x.clone(), r.clone()
    A.add_rmsnorm_residual(xi, ri, w, in_place=True)
    xj, rj = x.clone(), r.clone()
    out = A.add_rmsnorm_residual(xj, rj, w, in_place=True)
    assert out[0] is xj and torch.equal(xj, y) and torch.equal(rj, s)


@pytest.mark.parametrize("bad", ["w_dtype", "w_len", "r_shape", "eps", "not_tensor", "alias"])
def test_a_remembered_call_does_not_skip_checks_for_other_inputs(bad):
    from fusedrms import validation
    from fusedrms.kernels import add_rmsnorm as A

    A.clear_plans()
    x, r, w = _inputs()
    A.add_rmsnorm(x, r, w)
    A.add_rmsnorm_residual(x.clone(), r.clone(), w, in_place=True)
    args = {"x": x, "r": r, "w": w, "eps": 1e-5}
    if bad == "w_dtype":
        args["w"] = w.to(torch.float64)
    elif bad == "w_len":
        args["w"] = w[:-1]
    elif bad == "r_shape":
        args["r"] = r[:-1]
    elif bad == "eps":
        args["eps"] = -1.0
    elif bad == "not_tensor":
        args["x"] = x.tolist()
    with pytest.raises(validation.InputError):
        if bad == "alias":
            A.add_rmsnorm_residual(x, x, w, in_place=True)
        else:
            A.add_rmsnorm(args["x"], args["r"], args["w"], args["eps"])


def test_strided_inputs_take_the_full_path_and_stay_correct():
    from fusedrms import checks, reference
    from fusedrms.kernels import add_rmsnorm as A

    A.clear_plans()
    x, r, w = _inputs(rows=6)
    xs, rs = x[::2], r[::2]
    for _ in range(2):
        y = A.add_rmsnorm(xs, rs, w)
    assert not A._PLANS
    assert checks.allclose(y, reference.add_rmsnorm(xs, rs, w, 1e-5, accum=torch.float64,
                                                    out_dtype=torch.float64)).ok


def test_fast_path_can_be_switched_off(monkeypatch):
    from fusedrms.kernels import add_rmsnorm as A

    A.clear_plans()
    monkeypatch.setattr(A, "FAST_PATH", False)
    x, r, w = _inputs()
    A.add_rmsnorm(x, r, w)
    assert not A._PLANS


def test_large_batches_take_the_whole_row_launch_and_small_ones_the_table():
    from fusedrms.kernels import add_rmsnorm as A

    table_cfg = A.LaunchConfig(2, 8)
    sms, bf16 = 132, torch.bfloat16
    big, replaced = A.batch_config(table_cfg, A.LARGE_BATCH_ROWS_PER_SM * sms, 8192, sms, bf16,
                                   write_sum=True)
    assert replaced and big == A.LaunchConfig(1, 32) and big.chunk is None
    small, replaced = A.batch_config(table_cfg, A.LARGE_BATCH_ROWS_PER_SM * sms - 1, 8192, sms,
                                     bf16, write_sum=True)
    assert not replaced and small is table_cfg
    # rows of 2048 columns or fewer keep the table's entry at any batch
    assert A.batch_config(table_cfg, 10**6, 2048, sms, bf16, write_sum=False) == (table_cfg, None)
    # the interpreter keeps its one configuration, and says so
    cfg, source = A.config_and_source(10**5, 8192, torch.float32, torch.device("cpu"),
                                      write_sum=False)
    assert cfg == A.INTERPRETER_CONFIG and source.startswith("interpreter")
    assert A.launch_config(10**5, 8192, torch.float32, torch.device("cpu"),
                           write_sum=False) == A.INTERPRETER_CONFIG


@pytest.mark.gpu
def test_gpu_config_and_source_names_the_rule_that_replaced_the_table():
    sms = A.sm_count(torch.device("cuda"))
    many = A.LARGE_BATCH_ROWS_PER_SM * sms
    cfg, source = A.config_and_source(many, 8192, torch.bfloat16, torch.device("cuda"),
                                      write_sum=True)
    assert (cfg, None) == A.large_batch_config(8192, torch.bfloat16, write_sum=True)
    assert source.startswith("large-batch rule")
    cfg, source = A.config_and_source(many, 8192, torch.bfloat16, torch.device("cuda"),
                                      write_sum=False)
    assert cfg == A.mid_batch_config(8192, torch.bfloat16) == A.LaunchConfig(1, 16)
    assert source.startswith("large-batch rule") and "two 16-byte vectors" in source
    cfg, source = A.config_and_source(1, 65536, torch.bfloat16, torch.device("cuda"),
                                      write_sum=True)
    assert cfg == A.SPLIT_CONFIG and source.startswith("split rule")
    cfg, source = A.config_and_source(1, 4096, torch.bfloat16, torch.device("cuda"),
                                      write_sum=False)
    table = A.choose_config(4096, torch.bfloat16)[0]
    assert cfg == A.one_row_config(table, 4096, torch.bfloat16)
    assert source.startswith("one-row rule") or cfg == table
    cfg, source = A.config_and_source(16, 4096, torch.bfloat16, torch.device("cuda"),
                                      write_sum=False)
    assert (cfg, source) == A.choose_config(4096, torch.bfloat16)
    mid = A.MID_BATCH_ROWS_PER_SM * sms
    cfg, source = A.config_and_source(mid, 4096, torch.bfloat16, torch.device("cuda"),
                                      write_sum=False)
    assert cfg == A.mid_batch_config(4096, torch.bfloat16) and source.startswith("mid-batch rule")
    cfg, source = A.config_and_source(mid, 4096, torch.bfloat16, torch.device("cuda"),
                                      write_sum=True)
    assert (cfg, source) == A.choose_config(4096, torch.bfloat16)


@pytest.mark.parametrize("cols, dtype, warps", [
    (4096, torch.bfloat16, 16),  # 8 KB rows: one 16-byte vector per thread, 512 threads
    (8192, torch.bfloat16, 32),
    (4096, torch.float32, 32),  # bytes decide, not columns
    (16384, torch.bfloat16, 32),  # then 32 warps at most: two vectors per thread
    (32768, torch.float32, 32),  # 32 fp32 values per thread, the most MAX_COLS needs
    (20000, torch.float16, 32),  # the row's BLOCK decides: 32768
    (3000, torch.float16, 16),  # BLOCK 4096
])
def test_the_large_batch_launch_gives_each_thread_one_vector_up_to_32_warps(cols, dtype, warps):
    from fusedrms.kernels import add_rmsnorm as A

    size = torch.empty((), dtype=dtype).element_size()
    rule, why = A.large_batch_config(cols, dtype, write_sum=True)
    assert rule == A.LaunchConfig(1, warps) and rule.chunk is None and why is None
    got, replaced = A.batch_config(A.LaunchConfig(1, 4), 10**5, cols, 132, dtype,
                                   write_sum=True)
    # rows of 128 KB in fp32 take the wide-sum rule's two passes before the large-batch rule
    assert got == (A.WIDE_SUM_CONFIG if cols * size >= 128 << 10 else rule) and replaced
    assert triton.next_power_of_2(cols) // (32 * warps) <= 32  # values per thread in registers
    assert warps == 32 or triton.next_power_of_2(cols) * size == 16 * 32 * warps


def test_large_batches_of_the_fused_op_launch_otherwise_at_16_and_32_kb_two_byte_rows():
    sms, table = 132, A.LaunchConfig(1, 4)
    for rows in (A.LARGE_BATCH_ROWS_PER_SM * sms, 16384):
        for dtype in (torch.bfloat16, torch.float16):
            # the row's BLOCK decides: 8192 columns, then 16384
            for cols, want, why in ((8192, A.LaunchConfig(1, 16), "two 16-byte vectors"),
                                    (5000, A.LaunchConfig(1, 16), "two 16-byte vectors"),
                                    (16384, A.FUSED_32KB_ROW_CONFIG, "two passes"),
                                    (9000, A.FUSED_32KB_ROW_CONFIG, "two passes")):
                got, rule = A.batch_config(table, rows, cols, sms, dtype, write_sum=False)
                assert got == want and rule.startswith("large-batch rule") and why in rule
                # the residual-writing op keeps one vector a thread, the row whole
                got, rule = A.batch_config(table, rows, cols, sms, dtype, write_sum=True)
                assert (got, None) == A.large_batch_config(cols, dtype, write_sum=True)
                assert got == A.LaunchConfig(1, 32)
                assert rule == f"large-batch rule ({A.LARGE_BATCH_ROWS_PER_SM} rows per SM or more)"
        # other widths, and fp32 rows of 16 and 32 KB, keep one vector a thread
        for cols, dtype, warps in ((4096, torch.bfloat16, 16), (32768, torch.bfloat16, 32),
                                   (4096, torch.float32, 32), (8192, torch.float32, 32)):
            got, rule = A.batch_config(table, rows, cols, sms, dtype, write_sum=False)
            assert (got, None) == A.large_batch_config(cols, dtype, write_sum=False)
            assert got == A.LaunchConfig(1, warps)
            assert rule == f"large-batch rule ({A.LARGE_BATCH_ROWS_PER_SM} rows per SM or more)"
    # Inductor's launch: two passes over 8,192-column chunks, one row per program, 32 warps
    assert A.FUSED_32KB_ROW_CONFIG == A.LaunchConfig(1, 32, 1, None, 8192)
    assert A.large_batch_config(16384, torch.float32, write_sum=False) == (A.LaunchConfig(1, 32),
                                                                           None)


def test_the_hinted_control_and_the_eviction_lever_compute_the_same_bits(monkeypatch):
    """The study's control (the design before: cache hints, w after the reduction) and its
    eviction lever (x and r loaded evict_last) change where bytes wait, not what is computed:
    both ops, in place too, give the shipped kernel's bits."""
    from fusedrms.kernels import add_rmsnorm as A

    x, r = (torch.randn(5, 3000).to(torch.bfloat16) for _ in range(2))
    w = (torch.rand(3000) + 0.5).to(torch.bfloat16)
    outs = []
    for hinted, eviction in ((False, ""), (True, ""), (False, "evict_last")):
        monkeypatch.setattr(A, "HINTED_LOADS", hinted)
        monkeypatch.setattr(A, "LOAD_EVICTION", eviction)
        xi, ri = x.clone(), r.clone()
        A.add_rmsnorm_residual(xi, ri, w, in_place=True)
        outs.append((A.add_rmsnorm(x, r, w), *A.add_rmsnorm_residual(x, r, w), xi, ri))
    assert all(torch.equal(a, b) for other in outs[1:] for a, b in zip(outs[0], other))


def test_the_two_pass_launch_is_correct_on_both_ops():
    from fusedrms.kernels import add_rmsnorm as A

    x, r, w = (torch.randn(3, 4100), torch.randn(3, 4100), torch.rand(4100) + 0.5)
    two_pass = A.LaunchConfig(1, 4, 1, None, 1024)  # TWO_PASS_CONFIG's design, chunks narrower
    y = A.add_rmsnorm(x, r, w, config=two_pass)
    assert checks.allclose(y, reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64,
                                                    out_dtype=torch.float64)).ok
    y2, s2 = A.add_rmsnorm_residual(x, r, w, config=two_pass)
    y_ref, s_ref = reference.add_rmsnorm_residual(x, r, w, 1e-5, accum=torch.float64)
    assert torch.equal(s2, s_ref) and checks.allclose(y2, y_ref).ok
    xi, ri = x.clone(), r.clone()
    A.add_rmsnorm_residual(xi, ri, w, in_place=True, config=two_pass)
    assert torch.equal(ri, s_ref) and torch.equal(xi, y2)  # s read back from residual's memory


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_remembered_calls_and_the_large_batch_launch_match_the_full_path(dtype, monkeypatch):
    """On a GPU the second call launches the compiled kernel directly; it must give the bits the
    full path gives, for both ops and in place, at a decode shape and large batches of 16 to 64
    KB rows (the whole row at 32 warps) and of 65536 columns (two passes; a row split over
    programs at 1 and 3 rows), with and without the cache hints of the design before and the
    eviction lever."""
    from fusedrms.kernels import add_rmsnorm as A

    sms = A.sm_count(torch.device("cuda"))
    big = A.LARGE_BATCH_ROWS_PER_SM * sms
    for (rows, cols), (hinted, eviction) in itertools.product(
            ((1, 4096), (big, 8192), (big, 16384), (big, 32768), (3, 5000), (big, 65536),
             (1, 65536), (3, 40000), (sms, 65536)),
            ((False, ""), (True, ""), (False, "evict_last"))):
        if cols > A.WHOLE_ROW_MAX_COLS and (hinted or eviction):
            continue  # the hints are the whole-row kernel's; two passes have their own
        A.clear_plans()
        monkeypatch.setattr(A, "HINTED_LOADS", hinted)
        monkeypatch.setattr(A, "LOAD_EVICTION", eviction)
        x, r = (torch.randn(rows, cols, device="cuda").to(dtype) for _ in range(2))
        w = (torch.rand(cols, device="cuda") + 0.5).to(dtype)
        first = A.add_rmsnorm(x, r, w)
        assert len(A._PLANS) == 1
        again = A.add_rmsnorm(x, r, w)
        y, s = A.add_rmsnorm_residual(x, r, w)
        y2, s2 = A.add_rmsnorm_residual(x, r, w)
        A.FAST_PATH = False
        try:
            full = A.add_rmsnorm(x, r, w)
            y_full, s_full = A.add_rmsnorm_residual(x, r, w)
        finally:
            A.FAST_PATH = True
        assert torch.equal(first, full) and torch.equal(again, full)
        assert torch.equal(y2, y_full) and torch.equal(s2, s_full) and torch.equal(y, y_full)
        ref = reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
        # compared on the GPU: on the host it is float64 copies of 2112 rows on two threads
        assert checks.allclose(again, ref, on_device=True).ok
        xi, ri = x.clone(), r.clone()
        A.add_rmsnorm_residual(xi, ri, w, in_place=True)
        xi, ri = x.clone(), r.clone()
        A.add_rmsnorm_residual(xi, ri, w, in_place=True)  # the remembered in-place launch
        assert torch.equal(xi, y_full) and torch.equal(ri, s_full)


@pytest.mark.gpu
def test_gpu_each_design_launched_early_waits_for_the_call_before(monkeypatch):
    """With programmatic dependent launch (compute capability 9+) a call may start while the one
    before drains. Three in-place calls, each reading what the one before wrote, captured back
    to back in one CUDA graph must give the bits of three calls one at a time with PDL off: the
    whole row (remembered and full path), two passes, and a row split over two kernels."""
    from fusedrms.kernels import add_rmsnorm as A
    from fusedrms.kernels import add_rmsnorm_split as S
    from fusedrms.kernels import direct_launch as D

    device = torch.device("cuda")
    pdl = torch.cuda.get_device_capability()[0] >= 9
    assert D.launches_with_pdl(device) is pdl  # the rule holds on the GPU the test runs on
    whole = A.launch_config(64, 4096, torch.bfloat16, device, write_sum=True)
    for rows, cols, config in ((64, 4096, None), (64, 4096, whole), (8, 65536, A.TWO_PASS_CONFIG),
                               (2, 65536, A.SPLIT_CONFIG)):
        A.clear_plans()
        x, r = (torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w = torch.rand(cols, device="cuda", dtype=torch.bfloat16) + 0.5
        launched = A.launch(x, r, w, torch.empty_like(x), torch.empty_like(x), 1e-5,
                            config or whole)
        kernels = ((launched.partials, launched.normalize) if isinstance(launched, S.SplitLaunch)
                   else (launched,))
        assert all(k.compiled.metadata.launch_pdl is pdl for k in kernels), (rows, cols)
        xs, rs = x.clone(), r.clone()
        A.add_rmsnorm_residual(xs.clone(), rs.clone(), w, in_place=True, config=config)
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            for _ in range(3):  # each call adds onto the residual the call before wrote
                A.add_rmsnorm_residual(xs, rs, w, in_place=True, config=config)
        torch.cuda.current_stream().wait_stream(stream)
        graph.replay()
        torch.cuda.synchronize()
        monkeypatch.setattr(D, "PDL", False)
        x_one, r_one = x.clone(), r.clone()
        for _ in range(3):
            A.add_rmsnorm_residual(x_one, r_one, w, in_place=True, config=config)
            torch.cuda.synchronize()
        monkeypatch.setattr(D, "PDL", True)
        assert torch.equal(rs, r_one) and torch.equal(xs, x_one), (rows, cols, config)


def _installed_entries():
    path = tuning.installed_path("capstone", "h200")
    table = tuning.load("capstone", path)
    fused = [((cols, "float16"), A.large_batch_config(cols, torch.float16, write_sum=False)[0])
             for cols in (8192, 16384)]
    return sorted(table["configs"].items()) + [
        ((8192, "bfloat16"), A.large_batch_config(8192, torch.bfloat16, write_sum=True)[0])] + fused


@pytest.mark.parametrize("key,cfg", _installed_entries(), ids=lambda v: str(v))
def test_every_configuration_in_use_computes_both_ops(key, cfg):
    """Each launch the H200 runs (its table's entries, and the large-batch launches) on the CPU
    path, at the entry's own width: y against the float64 reference, s bit for bit."""
    cols, name = key
    dtype = getattr(torch, name)
    g = torch.Generator().manual_seed(cols)
    x, r = (torch.randn(2, cols, generator=g).to(dtype) for _ in range(2))
    w = (torch.rand(cols, generator=g) + 0.5).to(dtype)
    y = A.add_rmsnorm(x, r, w, config=cfg)
    assert checks.allclose(y, reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64,
                                                    out_dtype=torch.float64)).ok
    y2, s2 = A.add_rmsnorm_residual(x, r, w, config=cfg)
    y_ref, s_ref = reference.add_rmsnorm_residual(x, r, w, 1e-5, accum=torch.float64)
    assert torch.equal(s2, s_ref) and checks.allclose(y2, y_ref).ok


def test_in_place_never_gives_autograd_a_changed_tensor():
    """Issue 26: in_place=True wrote through pointers behind autograd's back (a silent wrong
    gradient). A tensor that requires grad is refused; one autograd saved is caught at backward."""
    from fusedrms import validation
    from fusedrms.kernels import add_rmsnorm as A

    x = torch.randn(2, 8, requires_grad=True)
    h = x * 1.0
    loss = (h * h).sum()
    with pytest.raises(validation.InputError, match="in_place=True overwrites x, which requires grad"):
        A.add_rmsnorm_residual(h, torch.randn(2, 8), torch.ones(8), in_place=True)
    w = torch.randn(8, requires_grad=True)
    saved = torch.randn(2, 8)  # no grad of its own, but saved by w * saved for dw
    loss = (w * saved).sum()
    A.add_rmsnorm_residual(saved, torch.randn(2, 8), torch.ones(8), in_place=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    with torch.inference_mode():  # vLLM's setting: no versions to bump, still works
        xi, ri = torch.randn(2, 8), torch.randn(2, 8)
        y, s = A.add_rmsnorm_residual(xi, ri, torch.ones(8), in_place=True)
        assert y.data_ptr() == xi.data_ptr() and s.data_ptr() == ri.data_ptr()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "default" if c is None else c.label())
def test_bf16_subnormals_are_read_and_stored_exactly(config):
    """Issue 26: on the CPU route bf16 values below 1.18e-38 were read up to 8x off, and a
    subnormal sum stored as 0."""
    x = torch.tensor([[4e-19, 3e-39, -1.5e-39, 9.2e-41], [1e-39, -2e-39, 5e-40, 1e-38]],
                     dtype=torch.bfloat16, device=DEV)
    r = torch.tensor([[0.0, 1e-39, 0.0, 9.2e-41], [2e-39, 0.0, -5e-40, 0.0]],
                     dtype=torch.bfloat16, device=DEV)
    w = torch.ones(4, dtype=torch.bfloat16, device=DEV)
    y, s = A.add_rmsnorm_residual(x, r, w, 1e-5, config=config)
    ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, 1e-5, accum=torch.float64)
    assert checks.equal(s, ref_s)  # sums of subnormals are exact in bf16
    assert checks.allclose(y, ref_y)
    assert checks.allclose(A.add_rmsnorm(x, r, w, 0.0, config=config)[:1],
                           reference.add_rmsnorm(x, r, w, 0.0, accum=torch.float64)[:1])


def test_forward_only_entry_points_refuse_inputs_that_require_grad():
    """Issue 26: the outputs had no grad_fn, so backward() silently skipped the fused add + norm;
    a call remembered without grad must not let one with grad through the fast path."""
    x, r, w = inputs(3, 16, torch.float32)
    calls = {"capstone.fused": lambda *a: A.add_rmsnorm(*a),
             "capstone.fused_residual": lambda *a: A.add_rmsnorm_residual(*a)[0]}
    for kernel, call in calls.items():
        expected = call(x, r, w)  # remembered: the next calls could take the fast path
        for args, name in (((x.clone().requires_grad_(), r, w), "x"),
                           ((x, r.clone().requires_grad_(), w), "residual"),
                           ((x, r, torch.nn.Parameter(w.clone())), "w")):
            with pytest.raises(InputError, match=f"{name} requires grad, but {kernel} is forward "
                                                 f"only.*rmsnorm_backward.rmsnorm, add_rmsnorm"):
                call(*args)
            with torch.no_grad():
                assert torch.equal(call(*args), expected)


@pytest.mark.parametrize("layout", ["x_residual", "x_w", "residual_w"])
def test_a_remembered_in_place_call_still_refuses_overlapping_memory(layout):
    """The in-place plan checks byte ranges on every call (a cheap test, the full one on a hit)."""
    x, r, w = inputs(2, 64, torch.float32)
    A.add_rmsnorm_residual(x.clone(), r.clone(), w, in_place=True)  # remembered for this layout
    buf = torch.randn(5 * 64, device=DEV)
    xs, rs = buf[:128].view(2, 64), buf[192:320].view(2, 64)
    ws = w
    if layout == "x_residual":
        rs = buf[64:192].view(2, 64)
    elif layout == "x_w":
        ws = buf[64:128]
    else:
        ws = buf[256:320]
    with pytest.raises(InputError, match="share"):
        A.add_rmsnorm_residual(xs, rs, ws, in_place=True)


def test_one_row_gets_one_program_with_no_more_warps_than_its_vectors_need():
    bf16, fp32 = torch.bfloat16, torch.float32
    table = A.LaunchConfig(2, 16)  # the H200 table's launch at 4096 bf16 columns
    got, rule = A.batch_config(table, 1, 4096, 132, bf16, write_sum=True)
    assert got == A.LaunchConfig(1, 8) and rule.startswith("one-row rule")
    assert A.batch_config(table, 1, 2048, 132, fp32, write_sum=False)[0] == A.LaunchConfig(1, 8)
    assert A.batch_config(A.LaunchConfig(1, 8), 1, 2048, 132, bf16,
                          write_sum=False)[0] == A.LaunchConfig(1, 4)
    # never more warps than the table's, and from two rows the table's launch
    assert A.batch_config(A.LaunchConfig(1, 4), 1, 4096, 132, fp32, write_sum=True) == (
        A.LaunchConfig(1, 4), None)
    assert A.batch_config(table, 2, 4096, 132, bf16, write_sum=True) == (table, None)
    # rows wider than registers hold keep their own rule
    assert A.batch_config(table, 1, 65536, 132, bf16, write_sum=True)[0] == A.SPLIT_CONFIG


def test_a_few_rows_per_sm_give_the_fused_op_one_row_per_program_and_two_vectors_a_thread():
    bf16, fp32, sms = torch.bfloat16, torch.float32, 132
    table = A.LaunchConfig(2, 16)  # the H200 table's launch at 4096 bf16 columns
    first, last = A.MID_BATCH_ROWS_PER_SM * sms, A.LARGE_BATCH_ROWS_PER_SM * sms - 1
    for rows in (first, 1024, last):
        got, rule = A.batch_config(table, rows, 4096, sms, bf16, write_sum=False)
        assert got == A.LaunchConfig(1, 8) and rule.startswith("mid-batch rule"), rows
        # the residual-writing op keeps the table's launch
        assert A.batch_config(table, rows, 4096, sms, bf16, write_sum=True) == (table, None)
    # below the range the table's, above it the large-batch rule's
    assert A.batch_config(table, first - 1, 4096, sms, bf16, write_sum=False) == (table, None)
    assert A.batch_config(table, last + 1, 4096, sms, bf16,
                          write_sum=False)[1].startswith("large-batch rule")
    # one warp per KB of the padded row, from 2048 columns, up to 32 warps
    for cols, dtype, warps in ((2048, bf16, 4), (3000, bf16, 8), (4096, fp32, 16),
                               (16384, bf16, 32), (32768, bf16, 32)):
        assert A.batch_config(table, 1024, cols, sms, dtype,
                              write_sum=False)[0] == A.LaunchConfig(1, warps), (cols, dtype)
    assert A.batch_config(table, 1024, 1024, sms, bf16, write_sum=False) == (table, None)
    # a table entry equal to the rule's launch is the table's, and says so
    assert A.batch_config(A.LaunchConfig(1, 8), 1024, 4096, sms, bf16,
                          write_sum=False) == (A.LaunchConfig(1, 8), None)
    # rows wider than registers hold keep their own rules
    assert A.batch_config(table, 1024, 65536, sms, bf16,
                          write_sum=False)[0] == A.EXCHANGE_CONFIG


@pytest.mark.gpu
@pytest.mark.parametrize("cols, dtype", [(4096, torch.bfloat16), (2048, torch.float16),
                                         (3000, torch.float32)])
def test_gpu_the_mid_batch_launch_is_exact(cols, dtype):
    rows = A.MID_BATCH_ROWS_PER_SM * A.sm_count(torch.device("cuda")) + 5
    cfg, source = A.config_and_source(rows, cols, dtype, torch.device("cuda"), write_sum=False)
    assert source.startswith("mid-batch rule") or cfg == A.choose_config(cols, dtype)[0]
    x, r, w = inputs(rows, cols, dtype)
    ref = reference.add_rmsnorm(x, r, w, accum=torch.float64)
    assert checks.allclose(A.add_rmsnorm(x, r, w), ref), source


@pytest.mark.gpu
def test_a_one_row_call_on_the_gpu_runs_the_one_row_launch():
    cfg, source = A.config_and_source(1, 4096, torch.float16, torch.device("cuda"),
                                      write_sum=True)
    assert cfg.rows_per_program == 1 and cfg.num_warps <= 8
    x, r, w = inputs(1, 4096, torch.float16)
    y, s = A.add_rmsnorm_residual(x, r, w)
    ref_y, ref_s = reference.add_rmsnorm_residual(x, r, w, accum=torch.float64)
    assert checks.equal(s, ref_s) and checks.allclose(y, ref_y), source
