"""Shared test setup: the environment decides GPU or CPU (interpreter) before any kernel import."""
import os

import pytest

from fusedrms import env

ENV = env.current()


def pytest_collection_modifyitems(config, items):
    if ENV.on_gpu:
        return
    skip_gpu = pytest.mark.skip(reason="needs a GPU: run on the device machine "
                                       "(code/scripts/gpu/run.sh tests runs them)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def device():
    return ENV.device


@pytest.fixture
def seeded():
    import torch

    torch.manual_seed(1234)
    return torch.Generator().manual_seed(1234)


def require_or_skip(env_var: str, available: bool, reason: str):
    """Skip when a tool is missing locally, but fail in CI (which sets env_var=1)."""
    if available:
        return
    if os.environ.get(env_var) == "1":
        pytest.fail(f"{reason} ({env_var}=1 requires it)")
    pytest.skip(reason)
