"""The fused FP8 kernel's launch rules: its configurations, the candidates, the tuning loader."""
import pytest
import torch

from fusedrms import env, validation
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


def test_lean_block_steps_are_a_launch_option_of_one_row_per_program():
    lean = C.FusedConfig(4, None, "block_reciprocal", lean=True)
    assert lean.label.endswith("lean block steps") and lean.runs("served")
    entry = {"cols": 8192, "num_warps": 4, "division": "block_reciprocal", "bit_exact": True,
             "contract": "served"}
    assert C.config_from_record({**entry, "lean": True}) == ((8192, "served"), lean)
    assert C.config_from_record(entry)[1].lean is False
    assert C.config_from_record({**entry, "lean": "yes"})[1].lean is False  # only True is lean
    for bad in (C.FusedConfig(8, None, "block_reciprocal", 2, lean=True),
                C.FusedConfig(4, None, "block_reciprocal", lean=1)):
        with pytest.raises(validation.InputError, match="lean must be True or False"):
            C.resolve_config(7168, None, True, None, bad)
    assert any(c.lean for c in C.CANDIDATES) and not C.baseline_config(7168).lean


@pytest.mark.parametrize("floor,lean", [(spec.ABSMAX_FLOOR, True), (C.LEAN_MIN_FLOOR, True),
                                        (C.LEAN_MIN_FLOOR / 2, False), (0.0, False)])
def test_the_launch_is_lean_only_where_every_block_operand_is_normal(floor, lean):
    """Below an absmax floor of 2^-60 a block's divisions may meet subnormal operands, where the
    fast path is not exact: the launch takes div_rn there, and the naive pair never goes lean."""
    x, w = spec.make_inputs(2, 256, 0)
    cfg = C.FusedConfig(4, None, "block_reciprocal", lean=True)
    *_, meta = q._launch_setup(x, w, spec.RMS_NORM_EPS, floor, "auto", None, True, None, cfg)
    assert meta["LEAN"] is lean
    assert "LEAN" not in q.quantize_meta(meta) and "LEAN" not in q.norm_meta(meta)


def test_a_gpu_where_the_proof_fails_launches_div_rn(monkeypatch):
    """The lean steps are proven per device on its first lean launch; a difference anywhere makes
    every launch there take div_rn (no silent wrong code)."""
    from fusedrms.kernels import rmsnorm_fp8_lean as proof

    fake = env.Env("cuda", torch.device("cuda"), "Fake GPU", "compiled for the GPU", "nvcc",
                   {"torch": torch.__version__, "python": "3"})
    runs = []

    def failing():
        runs.append(1)
        return {"absmax / 448": 0, "448 / absmax": 2, "1 / scale": 0, "checked": 9}

    monkeypatch.setattr(env, "current", lambda: fake)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    monkeypatch.setattr(q, "lean_division_errors", failing)
    monkeypatch.setattr(q, "_LEAN_REPORTS", {})
    assert q.lean_is_exact_on("cuda") is False and q.lean_is_exact_on("cuda") is False
    assert runs == [1]  # once per device
    monkeypatch.setattr(q, "lean_division_errors",
                        lambda: {k: 0 for k in proof.DIVISIONS} | {"checked": 9})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Other GPU")
    assert q.lean_is_exact_on("cuda") is True
