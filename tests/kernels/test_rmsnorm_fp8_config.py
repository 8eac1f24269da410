"""The fused FP8 kernel's launch rules: its configurations, the candidates, the tuning loader."""
import pytest
import torch

from fusedrms import env
from fusedrms.kernels import rmsnorm_fp8 as q
from fusedrms.kernels import rmsnorm_fp8_config as C
from fusedrms.kernels import rmsnorm_fp8_spec as spec

ENV = env.current()


def test_launch_options_cap_registers_only_on_cuda_at_16_warps(monkeypatch):
    if ENV.backend != "cuda":
        assert C.launch_options(16) == {"num_warps": 16}
    fake = env.Env("cuda", torch.device("cuda"), "NVIDIA H200", "compiled for the GPU", "nvcc",
                   {"torch": torch.__version__, "python": "3"})
    monkeypatch.setattr(env, "current", lambda: fake)
    monkeypatch.setattr(C, "supports_maxnreg", lambda: True)
    assert C.launch_options(16) == {"num_warps": 16, "maxnreg": 64}
    assert C.launch_options(16, cap_registers=False) == {"num_warps": 16}
    assert C.launch_options(8) == {"num_warps": 8}


def test_baseline_is_the_first_candidate_and_the_interpreter_uses_it():
    assert C.CANDIDATES[0] == C.baseline_config(spec.HIDDEN_SIZE)
    assert len(set(C.CANDIDATES)) == len(C.CANDIDATES)
    if not ENV.on_gpu:
        assert C.choose_config(spec.HIDDEN_SIZE)[0] == C.baseline_config(spec.HIDDEN_SIZE)


def test_the_rows_kernel_runs_the_exact_contract_only_and_no_table_says_otherwise():
    rows = C.FusedConfig(8, None, "block_reciprocal", 2)
    assert rows.runs("exact") and not rows.runs("served")
    assert all(C.FusedConfig(8).runs(c) for c in spec.CONTRACTS)
    entry = {"cols": 256, "num_warps": 8, "division": "block_reciprocal", "rows_per_program": 2,
             "bit_exact": True}
    assert C.config_from_record({**entry, "contract": "exact"}) == ((256, "exact"), rows)
    with pytest.raises(ValueError, match="not a bit-exact fused configuration"):
        C.config_from_record({**entry, "contract": "served"})


def test_the_kernel_module_launches_with_these_rules():
    """rmsnorm_fp8 re-exports them (chapter 8 and the tests read them there)."""
    for name in ("FusedConfig", "CANDIDATES", "baseline_config", "choose_config",
                 "config_from_record", "launch_options", "num_warps_for", "REGISTER_CAP"):
        assert getattr(q, name) is getattr(C, name), name
