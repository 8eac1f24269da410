"""The study's timing processes on the CPU: every candidate computes the op, every peer is
listed, the timing and Python workers run end to end, and FlashInfer's absence is reported."""
import pytest
import torch

from fusedrms import checks, reference
from fusedrms.book import study, study_timing
from fusedrms.kernels import add_rmsnorm as A
from fusedrms.kernels import peers_flashinfer


@pytest.mark.parametrize("cols", [100, 2048, 4100])
def test_every_candidate_is_correct(cols):
    g = torch.Generator().manual_seed(cols)
    x = torch.randn(3, cols, generator=g).to(torch.bfloat16)
    r = torch.randn(3, cols, generator=g).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(cols, generator=g)).to(torch.bfloat16)
    y_ref = reference.add_rmsnorm(x, r, w, 1e-5, accum=torch.float64, out_dtype=torch.float64)
    y2_ref, s_ref = reference.add_rmsnorm_residual(x, r, w, 1e-5, accum=torch.float64)
    cands = study_timing.candidates(cols, torch.bfloat16)
    assert cands and all(isinstance(c, A.LaunchConfig) for c in cands.values())
    if cols > 4096:
        assert any(c.chunk for c in cands.values()), "wide rows get the two-pass (Inductor) shape"
    for name, cfg in cands.items():
        assert checks.allclose(A.add_rmsnorm(x, r, w, 1e-5, config=cfg), y_ref).ok, name
        y, s = A.add_rmsnorm_residual(x, r, w, 1e-5, config=cfg)
        assert checks.allclose(y, y2_ref).ok and torch.equal(s, s_ref), name


def test_loop_and_no_loop_agree(monkeypatch):
    x, r = torch.randn(5, 300), torch.randn(5, 300)
    w = torch.rand(300) + 0.5
    plain = A.add_rmsnorm(x, r, w)
    monkeypatch.setattr(A, "TILE_LOOP_ALWAYS", True)
    assert torch.equal(A.add_rmsnorm(x, r, w), plain)


def test_study_impls_cover_every_peer():
    fused = study_timing.impls("fused", 4096, torch.bfloat16)
    residual = study_timing.impls("residual", 4096, torch.bfloat16)
    for name in ("torch.compile", "torch.rms_norm_add", "torch.eager_chain", "ours.current"):
        assert name in fused
    for name in ("torch.compile", "liger.fused_add_rms_norm", "flashinfer.fused_add_rmsnorm",
                 "ours.current", "ours.current_in_place"):
        assert name in residual
    # in-place peers run last: they overwrite the rotating inputs
    order = [mutates for _, mutates in residual.values()]
    assert order == sorted(order)
    # the launch in use is timed again after every other launch on the same inputs (the in-place
    # ones excepted), and the table's launch before any rule on the batch is timed beside it
    for impls in (fused, residual):
        names = [n for n, (_, mutates) in impls.items() if not mutates]
        assert names[-1] == study_timing.REPEAT and names[0] == "ours.current"
        assert impls[study_timing.REPEAT][0] is impls["ours.current"][0]
        assert study_timing.BEFORE_RULE in impls
    assert set(study_timing.CONTROLS) >= {study_timing.REPEAT, study_timing.BEFORE_RULE}
    x, r, w = torch.randn(3, 4096), torch.randn(3, 4096), torch.rand(4096) + 0.5
    ok, _ = study_timing.check("fused", fused["torch.rms_norm_add"][0](x, r, w, 1e-5), x, r, w)
    assert ok
    ok, _ = study_timing.check("fused", torch.zeros(3, 4096), x, r, w)
    assert not ok, "the study's check must reject a wrong output"


def test_flashinfer_missing_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEDRMS_FLASHINFER_INCLUDE", str(tmp_path / "nowhere"))
    monkeypatch.setattr(peers_flashinfer, "_STATE", {})
    text = peers_flashinfer.status()
    assert "not available" in text and "norm.cuh" in text
    with pytest.raises(RuntimeError):
        peers_flashinfer.load()


@pytest.mark.skipif(not (peers_flashinfer.include_dir() / "flashinfer" / "norm.cuh").exists()
                    or not __import__("shutil").which("nvcc"),
                    reason="FlashInfer's include tree or nvcc is not here")
def test_flashinfer_wrappers_compile(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEDRMS_CACHE", str(tmp_path))
    lib = peers_flashinfer.build(arch="sm_90")
    names = __import__("subprocess").run(["nm", "-D", str(lib)], capture_output=True,
                                         text=True).stdout
    for fn in ("fi_fused_add_rmsnorm", "fi_rmsnorm", "fi_fused_add_rmsnorm_fp8_block"):
        assert fn in names


def test_timing_worker_runs_end_to_end_on_tiny_shapes(capsys, tmp_path, monkeypatch):
    """The worker's whole path (inputs, every impl, checks, records) on the CPU; peers that
    cannot run here (Liger, FlashInfer) come back as error records, never as numbers."""
    import json
    import time

    monkeypatch.setattr(peers_flashinfer, "_STATE", {})
    monkeypatch.setenv("FUSEDRMS_FLASHINFER_INCLUDE", str(tmp_path / "nowhere"))
    study_timing.run_timing_worker(tmp_path, time.time() + 300, 0, device="cpu",
                            shapes=[(3, 100, "bf16"), (2, 64, "fp32")])
    msgs = [json.loads(line[2:]) for line in capsys.readouterr().out.splitlines()
            if line.startswith(study_timing.TAG)]
    recs = [m for m in msgs if m["kind"] == "record"]
    ours = [r for r in recs if r["impl"].startswith("ours.")]
    assert ours and all(r["status"] == "ok" and r["correct"] for r in ours), ours
    fi = [r for r in recs if r["impl"].startswith("flashinfer")]
    assert fi and all(r["status"].startswith("error") and "median_us" not in r for r in fi)
    for r in recs:
        if r["impl"] in ("torch.rms_norm_add", "torch.eager_chain"):
            # checked like ours (the eager chain rounds x + r to bf16, so it may miss the
            # fp32-sum reference's tolerance: the record says so)
            assert r["status"] == "ok" and r["correct"] in (True, False), r
    assert msgs[-1]["kind"] == "done"
    agg = study.aggregate_timing(msgs)
    assert any(r.get("fastest_peer") for r in agg if r["impl"] == "ours.current")


def _messages(capsys):
    import json

    return [json.loads(line[2:]) for line in capsys.readouterr().out.splitlines()
            if line.startswith(study_timing.TAG)]


def test_python_worker_on_cpu(capsys, tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(peers_flashinfer, "_STATE", {})
    monkeypatch.setenv("FUSEDRMS_FLASHINFER_INCLUDE", str(tmp_path / "nowhere"))
    study_timing.run_python_worker(tmp_path, time.time() + 300, device="cpu", calls=2)
    got = {(m["op"], m["impl"]): m for m in _messages(capsys) if m["kind"] == "py"}
    for key in (("fused", "ours.current"), ("fused", "ours.full_path"),
                ("fused", "torch.rms_norm_add"), ("residual", "ours.full_path")):
        assert got[key]["status"] == "ok" and got[key]["us_per_call"] > 0, got[key]
    assert got[("residual", "flashinfer.fused_add_rmsnorm")]["status"].startswith("error")
    assert A.FAST_PATH is True  # the variant restores the default
    assert (tmp_path / "python_profile_capstone_fused.txt").read_text().strip()

