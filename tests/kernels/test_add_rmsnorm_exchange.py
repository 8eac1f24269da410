"""The capstone's exchange design (add_rmsnorm_exchange): a row held by several programs that
exchange their partial sums. Both ops and in place against the float64 references, strided rows,
NaN and overflow, the same bits on every call, the launch rule that picks it, and on a GPU the
persistent grid (several rows per program, every program resident) in a CUDA graph."""
import pytest
import torch

from fusedrms import checks, reference
from fusedrms.kernels import add_rmsnorm as A
from fusedrms.kernels import add_rmsnorm_exchange as X
from fusedrms.kernels import add_rmsnorm_split as S
from fusedrms.validation import InputError

from .split_rows import assert_both_ops_and_in_place_match, inputs


def exchange(segment, warps=4, programs_per_sm=2):
    return A.LaunchConfig(1, warps, programs_per_sm=programs_per_sm, segment=segment)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows, cols, segment", [(3, 1000, 256), (2, 4096, 1024), (1, 777, 128),
                                                 (5, 300, 64)])
def test_both_ops_and_in_place_match_the_references(rows, cols, segment, dtype):
    x, r, w = inputs(rows, cols, dtype, seed=rows * cols)
    assert_both_ops_and_in_place_match(x, r, w, exchange(segment))


def test_rows_with_a_stride_wider_than_the_row():
    x, r, w = inputs(3, 1000, torch.float32, stride=1536)
    y = A.add_rmsnorm(x, r, w, config=exchange(256))
    assert checks.allclose(y, reference.add_rmsnorm(x, r, w, accum=torch.float64)).ok


def test_the_same_bits_on_every_call():
    """The partial sums are added in a fixed order, whichever program publishes last."""
    x, r, w = inputs(2, 3000, torch.bfloat16, seed=7)
    first, again = (A.add_rmsnorm_residual(x, r, w, config=exchange(512)) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_a_nan_and_an_overflowed_row_come_back_nan_and_spare_the_other_rows():
    """A NaN sum counts as published (it is not below zero), so its row finishes, as NaN."""
    x, r, w = inputs(3, 1000, torch.float32)
    x[0, 999] = float("nan")  # in the last, partial segment
    x[1] = 3e38  # the sum of squares overflows fp32 in every segment
    y = A.add_rmsnorm(x, r, w, config=exchange(256))
    assert torch.isnan(y[0]).all() and torch.isnan(y[1]).all()
    assert checks.allclose(y[2:], reference.add_rmsnorm(x[2:], r[2:], w,
                                                         accum=torch.float64)).ok


def test_the_label_and_the_table_record_name_the_exchange():
    cfg = exchange(4096, programs_per_sm=8)
    assert "4096 columns that exchange their sums" in cfg.label() and "8/SM" in cfg.label()
    rec = dict(cfg.as_dict(), cols=65536, dtype="bfloat16")
    assert A.config_from_record(rec) == ((65536, "bfloat16"), cfg)


@pytest.mark.parametrize("kwargs", [dict(chunk=1024), dict(rows_per_program=2)])
def test_an_exchanged_row_takes_one_row_and_no_chunks(kwargs):
    with pytest.raises(InputError, match="rows_per_program=1 and chunk=None"):
        A.LaunchConfig(**dict(dict(num_warps=4, programs_per_sm=2, segment=2048), **kwargs))


def test_the_rule_takes_rows_of_128_kb_and_more():
    bf16, fp16, fp32, sms = torch.bfloat16, torch.float16, torch.float32, 132
    # the fused op: every batch of rows of 128 KB or more, but few rows too wide to hold (split)
    for rows, cols, dtype in ((67, 65536, bf16), (10**5, 65536, fp16), (1024, 65536, fp32),
                              (1, 32768, fp32), (128, 40000, bf16)):
        got, rule = A.batch_config(A.TWO_PASS_CONFIG, rows, cols, sms, dtype, write_sum=False)
        assert got == A.EXCHANGE_CONFIG and rule.startswith("exchange rule"), (rows, cols, dtype)
    assert A.batch_config(A.TWO_PASS_CONFIG, 66, 65536, sms, bf16,
                          write_sum=False)[0] == A.SPLIT_CONFIG
    for cols, dtype in ((32768, bf16), (16384, fp32)):  # 64 KB: held whole by one program
        assert not A.takes_exchange(1024, cols, sms, dtype, write_sum=False)
    # the residual-writing op: fp32 only; at 65,536 columns not from half a row to two rows per
    # SM, at 32,768 not from half a row per SM (the wide-sum rule's two passes)
    for rows in (1, 66, 264, 10**5):
        assert A.takes_exchange(rows, 65536, sms, fp32, write_sum=True), rows
    for rows in (67, 128, 263):
        assert not A.takes_exchange(rows, 65536, sms, fp32, write_sum=True), rows
    for rows in (1, 66):
        assert A.takes_exchange(rows, 32768, sms, fp32, write_sum=True), rows
    for rows in (67, 128, 264, 10**5):
        assert not A.takes_exchange(rows, 32768, sms, fp32, write_sum=True), rows
        got, rule = A.batch_config(A.TWO_PASS_CONFIG, rows, 32768, sms, fp32, write_sum=True)
        assert got == A.WIDE_SUM_CONFIG and rule.startswith("wide-sum rule"), rows
        # the fused op still exchanges there
        assert A.batch_config(A.TWO_PASS_CONFIG, rows, 32768, sms, fp32,
                              write_sum=False)[0] == A.EXCHANGE_CONFIG, rows
    for rows in (1, 1024):
        assert not A.takes_exchange(rows, 65536, sms, bf16, write_sum=True)
    assert A.batch_config(A.TWO_PASS_CONFIG, 1024, 65536, sms, bf16,
                          write_sum=True) == (A.TWO_PASS_CONFIG, None)


@pytest.mark.gpu
@pytest.mark.parametrize("rows, cols, dtype", [(5000, 65536, torch.bfloat16),
                                               (700, 65536, torch.float32),
                                               (300, 40000, torch.float16),
                                               (20, 32768, torch.float32)])
def test_gpu_the_exchange_rule_is_exact_with_several_rows_per_program(rows, cols, dtype):
    """More rows than resident groups: each program walks several rows, loading the next row
    while it waits for the others' sums."""
    x, r, w = inputs(rows, cols, dtype, seed=rows)
    assert A.launch_config(rows, cols, dtype, x.device, write_sum=False) == A.EXCHANGE_CONFIG
    y = A.add_rmsnorm(x, r, w)
    assert checks.allclose(y, reference.add_rmsnorm(x, r, w, accum=torch.float64)).ok
    y2, s2 = A.add_rmsnorm_residual(x, r, w, config=A.EXCHANGE_CONFIG)
    y_ref, s_ref = reference.add_rmsnorm_residual(x, r, w, accum=torch.float64)
    assert torch.equal(s2, s_ref.to(dtype)) and checks.allclose(y2, y_ref).ok
    xi, ri = x.clone(), r.clone()
    A.add_rmsnorm_residual(xi, ri, w, in_place=True, config=A.EXCHANGE_CONFIG)
    assert torch.equal(ri, s2) and torch.equal(xi, y2)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [300, 1030])
def test_gpu_the_wide_sum_rule_is_exact_out_of_place_and_in_place(rows):
    """The residual-writing op's default launch at fp32 rows of 128 KB past half a row per SM (two
    passes over 8,192-column chunks), on the GPU's own SM count."""
    x, r, w = inputs(rows, 32768, torch.float32, seed=rows)
    got = A.launch_config(rows, 32768, torch.float32, x.device, write_sum=True)
    assert got == A.WIDE_SUM_CONFIG or 2 * rows <= A.sm_count(x.device)
    y2, s2 = A.add_rmsnorm_residual(x, r, w)
    y_ref, s_ref = reference.add_rmsnorm_residual(x, r, w, accum=torch.float64)
    assert torch.equal(s2, s_ref.to(torch.float32)) and checks.allclose(y2, y_ref).ok
    xi, ri = x.clone(), r.clone()
    A.add_rmsnorm_residual(xi, ri, w, in_place=True)
    assert torch.equal(ri, s2) and torch.equal(xi, y2)


def _library_launch(rows=4096, cols=65536, dtype=torch.bfloat16):
    """(x, r, w, y, the library's exchange launch of the fused op on them)."""
    x, r, w = inputs(rows, cols, dtype)
    y = torch.empty_like(x)
    cfg = A.EXCHANGE_CONFIG
    launch = X.launch_exchange(x, r, w, y, None, 1e-5, cfg.segment, cfg.num_warps,
                               cfg.programs_per_sm, A.sm_count(x.device), False)
    return x, r, w, y, launch


@pytest.mark.gpu
def test_gpu_every_program_of_the_grid_is_resident():
    """The grid never asks for more programs than the GPU holds at once (a program waiting for
    one that never starts would wait forever)."""
    x, r, w, y, launch = _library_launch()
    cfg = A.EXCHANGE_CONFIG
    programs = launch.direct.grid[0]
    compiled = launch.direct.compiled
    held = X.resident_per_sm(compiled, cfg.num_warps, x.device)
    assert 1 <= held and programs <= A.sm_count(x.device) * min(held, cfg.programs_per_sm)
    assert programs % S.segments(65536, cfg.segment) == 0
    assert compiled.n_spills == 0
    # a cooperative grid, the first launch's and the remembered one's alike
    assert compiled.metadata.launch_cooperative_grid
    assert launch.direct.bare is None or launch.direct.bare[1]


@pytest.mark.gpu
def test_gpu_a_grid_larger_than_the_gpu_holds_is_refused_at_launch():
    """With fewer SMs than the grid was sized for (a GPU shared under MPS), a program could wait
    for one that never starts; the cooperative launch is refused instead."""
    x, r, w, y, launch = _library_launch()
    cfg = A.EXCHANGE_CONFIG
    assert launch.direct.compiled.metadata.launch_cooperative_grid  # else this would hang
    held = X.resident_per_sm(launch.direct.compiled, cfg.num_warps, x.device)
    per_row = S.segments(65536, cfg.segment)
    too_many = (A.sm_count(x.device) * held // per_row + 1) * per_row
    sums = torch.full((4096 * per_row,), X.NOT_PUBLISHED.value, device=x.device)
    args, constexprs = X.kernel_arguments(x, r, w, y, None, sums, 1e-5, cfg.segment, False)
    with pytest.raises(RuntimeError, match="(?i)cooperative|too many"):
        X.add_rmsnorm_exchange_kernel[(too_many,)](
            *args, **constexprs, PHASE=0, num_warps=cfg.num_warps, num_stages=1,
            launch_cooperative_grid=True)
        torch.cuda.synchronize()
    y2 = torch.empty_like(y)  # the GPU still runs the library's launch
    launch(x, r, w, y2, y2)
    assert torch.equal(y2, A.add_rmsnorm(x, r, w))


@pytest.mark.gpu
def test_gpu_the_remembered_exchange_launch_runs_in_a_cuda_graph():
    """The fast path's launch and its fresh slots, captured and replayed: the same bits."""
    x, r, w = inputs(1024, 65536, torch.float32)
    A.clear_plans()
    y0, s0 = A.add_rmsnorm_residual(x, r, w)  # the full path; remembers the plan
    assert A.launch_config(1024, 65536, torch.float32, x.device,
                           write_sum=True) == A.EXCHANGE_CONFIG
    y1 = A.add_rmsnorm(x, r, w)
    out = {}
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out["y"], out["s"] = A.add_rmsnorm_residual(x, r, w)
        out["y1"] = A.add_rmsnorm(x, r, w)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out["y"], y0) and torch.equal(out["s"], s0) and torch.equal(out["y1"], y1)
