"""The capstone's row split over programs (add_rmsnorm_split): both ops and in place against the
float64 references, strided rows, NaN and overflow, the same bits on every call, and the
configuration that asks for it."""
import pytest
import torch

from fusedrms import checks, reference
from fusedrms.kernels import add_rmsnorm as A
from fusedrms.kernels import add_rmsnorm_split as S
from fusedrms.validation import InputError

from .split_rows import assert_both_ops_and_in_place_match, inputs


def test_segments_cover_the_row():
    assert S.segments(65536, 2048) == 32
    assert S.segments(40000, 2048) == 20  # the last one partial
    assert S.segments(1, 2048) == 1
    # the exchange design cuts its rows the same way, into 4096-column programs
    assert S.segments(65536, 4096) == 16
    assert S.segments(40000, 4096) == 10


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows, cols, segment", [(3, 1000, 256), (2, 4096, 1024), (1, 777, 128),
                                                 (4, 2048, 2048 // 8)])
def test_both_ops_and_in_place_match_the_references(rows, cols, segment, dtype):
    x, r, w = inputs(rows, cols, dtype, seed=rows * cols)
    assert_both_ops_and_in_place_match(x, r, w, A.LaunchConfig(1, 4, segment=segment))


def test_rows_with_a_stride_wider_than_the_row():
    x, r, w = inputs(3, 1000, torch.float32, stride=1536)
    assert x.stride(0) == 1536
    y = A.add_rmsnorm(x, r, w, config=A.LaunchConfig(1, 4, segment=256))
    assert checks.allclose(y, reference.add_rmsnorm(x, r, w, accum=torch.float64)).ok


def test_the_same_bits_on_every_call_and_from_the_whole_row_sum():
    """The partial sums are added in a fixed order: two calls give the same bits."""
    x, r, w = inputs(2, 3000, torch.bfloat16, seed=7)
    cfg = A.LaunchConfig(1, 4, segment=512)
    first, again = (A.add_rmsnorm_residual(x, r, w, config=cfg) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_a_nan_and_an_overflowed_row_come_back_nan_and_spare_the_other_rows():
    x, r, w = inputs(3, 1000, torch.float32)
    x[0, 999] = float("nan")  # in the last, partial segment
    x[1] = 3e38  # the sum of squares overflows fp32 in every segment
    y = A.add_rmsnorm(x, r, w, config=A.LaunchConfig(1, 4, segment=256))
    assert torch.isnan(y[0]).all() and torch.isnan(y[1]).all()
    assert checks.allclose(y[2:], reference.add_rmsnorm(x[2:], r[2:], w,
                                                         accum=torch.float64)).ok


@pytest.mark.parametrize("bad", [3, 0, True, 2.0, "2048"])
def test_a_segment_that_is_not_a_power_of_two_is_refused(bad):
    with pytest.raises(InputError, match="segment"):
        A.LaunchConfig(1, 4, segment=bad)


@pytest.mark.parametrize("kwargs", [dict(chunk=1024), dict(rows_per_program=2)])
def test_a_split_row_takes_one_row_and_no_chunks(kwargs):
    with pytest.raises(InputError, match="rows_per_program=1 and chunk=None"):
        A.LaunchConfig(**dict(dict(rows_per_program=1, num_warps=4, segment=2048), **kwargs))


def test_a_segment_as_wide_as_the_row_keeps_the_row_whole():
    x, r, w = inputs(2, 300, torch.float32)
    y = A.add_rmsnorm(x, r, w, config=A.LaunchConfig(1, 4, segment=512))
    assert checks.allclose(y, reference.add_rmsnorm(x, r, w, accum=torch.float64)).ok


def test_the_label_and_the_table_record_name_the_split():
    cfg = A.LaunchConfig(1, 8, segment=2048)
    assert "2048 columns (two kernels)" in cfg.label()
    rec = dict(cfg.as_dict(), cols=65536, dtype="bfloat16")
    assert A.config_from_record(rec) == ((65536, "bfloat16"), cfg)


@pytest.mark.gpu
def test_gpu_the_remembered_split_launch_runs_in_a_cuda_graph():
    """The fast path's two launches and their buffer of partial sums, captured and replayed."""
    x, r, w = inputs(4, 65536, torch.bfloat16)
    A.clear_plans()
    y0, s0 = A.add_rmsnorm_residual(x, r, w)  # the full path; remembers the plan
    assert A.launch_config(4, 65536, torch.bfloat16, x.device, write_sum=True) == A.SPLIT_CONFIG
    out = {}
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out["y"], out["s"] = A.add_rmsnorm_residual(x, r, w)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out["y"], y0) and torch.equal(out["s"], s0)
