import pytest
import torch

from fusedrms import registry


def test_register_and_get_roundtrip():
    impl = registry.register(registry.Impl("test.identity", "rmsnorm", lambda x, w, eps: x,
                                           route="torch", kernel=False))
    assert registry.get("test.identity") is impl
    assert impl in registry.impls("rmsnorm")
    assert impl.supports("cpu", torch.float32, 10**6)
    assert not impl.supports("cpu", torch.int8, 4)


def test_unknown_op_and_name_are_explained():
    with pytest.raises(ValueError, match="unknown op"):
        registry.register(registry.Impl("bad", "softmax", print, route="torch"))
    with pytest.raises(KeyError, match="no implementation named 'nope'; known:"):
        registry.get("nope")


def test_max_cols_limits_support():
    impl = registry.Impl("t", "rmsnorm", print, route="triton", max_cols=64)
    assert impl.supports("cpu", torch.float32, 64) and not impl.supports("cpu", torch.float32, 65)


def test_a_device_dependent_width_limit_applies_on_its_device_only():
    """FlashInfer's fused op keeps a row in shared memory: its limit is the GPU's, not a constant."""
    limits = {"cuda": 100}
    impl = registry.Impl("t", "rmsnorm", print, route="cuda", max_cols=200,
                         width_limit=lambda device: limits.get(device))
    assert impl.col_limit("cuda") == 100 and impl.col_limit("cpu") == 200
    assert impl.supports("cuda", torch.float32, 100)
    assert not impl.supports("cuda", torch.float32, 101)
    assert impl.supports("cpu", torch.float32, 200) and not impl.supports("cpu", torch.float32, 201)
    limits["cuda"] = None  # not known on this GPU: only the fixed limit holds
    assert impl.supports("cuda", torch.float32, 200)


def test_every_registered_module_imports():
    for module in registry.MODULES:
        __import__(module)
