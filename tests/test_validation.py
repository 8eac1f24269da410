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
    assert v.check_eps("1e-5") == 1e-5
    for bad in (-1.0, float("nan"), float("inf"), "x"):
        with pytest.raises(v.InputError):
            v.check_eps(bad)
