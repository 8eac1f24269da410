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


def test_every_registered_module_imports():
    for module in registry.MODULES:
        __import__(module)
