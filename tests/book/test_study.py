"""The performance study's CPU-side pieces: every candidate computes the op, the aggregation
finds the fastest peer, and the entry point refuses cleanly without a GPU."""
import pytest
import torch

from fusedrms import checks, env, reference
from fusedrms.book import study
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
    cands = study.candidates(cols, torch.bfloat16)
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
    fused = study.impls("fused", 4096, torch.bfloat16)
    residual = study.impls("residual", 4096, torch.bfloat16)
    for name in ("torch.compile", "torch.rms_norm_add", "torch.eager_chain", "ours.current"):
        assert name in fused
    for name in ("torch.compile", "liger.fused_add_rms_norm", "flashinfer.fused_add_rmsnorm",
                 "ours.current", "ours.current_in_place"):
        assert name in residual
    # in-place peers run last: they overwrite the rotating inputs
    order = [mutates for _, mutates in residual.values()]
    assert order == sorted(order)
    x, r, w = torch.randn(3, 4096), torch.randn(3, 4096), torch.rand(4096) + 0.5
    ok, _ = study.check("fused", fused["torch.rms_norm_add"][0](x, r, w, 1e-5), x, r, w)
    assert ok
    ok, _ = study.check("fused", torch.zeros(3, 4096), x, r, w)
    assert not ok, "the study's check must reject a wrong output"


def test_aggregate_medians_and_fastest_peer():
    msgs = [{"kind": "copy", "GBps": 4000.0}]
    for p, (ours, peer) in enumerate([(10.0, 12.0), (11.0, 9.0), (12.0, 10.0)]):
        for impl, t in (("ours.current", ours), ("torch.compile", peer)):
            msgs.append({"kind": "record", "rows": 4, "cols": 8, "dtype": "bf16", "op": "fused",
                         "impl": impl, "process": p, "status": "ok", "median_us": t,
                         "correct": True})
    msgs.append({"kind": "record", "rows": 4, "cols": 8, "dtype": "bf16", "op": "fused",
                 "impl": "liger.x", "process": 0, "status": "error: missing"})
    recs = {r["impl"]: r for r in study.aggregate_timing(msgs)}
    assert recs["ours.current"]["median_us"] == 11.0 and recs["ours.current"]["processes"] == 3
    assert recs["ours.current"]["fastest_peer"] == "torch.compile"
    assert recs["ours.current"]["ratio_to_fastest_peer"] == pytest.approx(11.0 / 10.0)
    assert recs["liger.x"]["status"].startswith("error") and "median_us" not in recs["liger.x"]
    assert recs["ours.current"]["floor_us"] == pytest.approx((3 * 4 * 8 * 2 + 16) / 4000e3)


def test_entry_point_without_gpu(capsys):
    if env.current().on_gpu:
        pytest.skip("a GPU is present")
    assert study.main(["study", "--budget", "1"]) == 2
    assert "GPU" in capsys.readouterr().err


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
    study.run_timing_worker(tmp_path, time.time() + 300, 0, device="cpu",
                            shapes=[(3, 100, "bf16"), (2, 64, "fp32")])
    msgs = [json.loads(line[2:]) for line in capsys.readouterr().out.splitlines()
            if line.startswith(study.TAG)]
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
            if line.startswith(study.TAG)]


def test_python_worker_on_cpu(capsys, tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(peers_flashinfer, "_STATE", {})
    monkeypatch.setenv("FUSEDRMS_FLASHINFER_INCLUDE", str(tmp_path / "nowhere"))
    study.run_python_worker(tmp_path, time.time() + 300, device="cpu", calls=2)
    got = {(m["op"], m["impl"]): m for m in _messages(capsys) if m["kind"] == "py"}
    for key in (("fused", "ours.current"), ("fused", "ours.full_path"),
                ("fused", "torch.rms_norm_add"), ("residual", "ours.full_path")):
        assert got[key]["status"] == "ok" and got[key]["us_per_call"] > 0, got[key]
    assert got[("residual", "flashinfer.fused_add_rmsnorm")]["status"].startswith("error")
    assert A.FAST_PATH is True  # the variant restores the default
    assert (tmp_path / "python_profile_capstone_fused.txt").read_text().strip()


def test_fp8_worker_on_cpu(capsys, tmp_path):
    import time

    study.run_fp8_worker(tmp_path, time.time() + 300, device="cpu", shapes=((3, 256),))
    got = {m["impl"]: m for m in _messages(capsys) if m["kind"] == "fp8"}
    assert got["fp8.fused"]["status"] == "ok" and got["fp8.fused"]["differing_codes"] == 0
    for name in ("fp8.fused_baseline", "fp8.approx_w8"):
        assert got[name]["status"] == "ok", got[name]


def test_parent_writes_every_file_even_when_children_fail(tmp_path, monkeypatch):
    """On a CPU the children exit at once (no GPU); the parent still writes its files, with the
    children's exits recorded, and stops within its budget."""
    import json
    import time

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    t0 = time.time()
    study.study(tmp_path / "out", budget_s=40)
    assert time.time() - t0 < 60
    out = tmp_path / "out"
    for name in ("timing.json", "python_calls.json", "fp8.json", "study_summary.json"):
        assert (out / name).exists(), name
    timing = json.loads((out / "timing.json").read_text())
    exits = [m for m in timing["raw"] if m["kind"] == "exit"]
    assert len(exits) == 3 and all(m["rc"] != 0 for m in exits)
    assert "ncu" in json.loads((out / "study_summary.json").read_text())["steps"]


def test_summary_table_names_best_of_ours_and_fastest_peer():
    recs = [{"rows": 4, "cols": 8, "dtype": "bf16", "op": "fused", "impl": i, "median_us": t,
             "processes": 3} for i, t in (("ours.current", 3.0), ("ours.liger_w4", 2.0),
                                          ("torch.compile", 2.5))]
    text = study.summary_table(recs)
    assert "liger_w4" in text and "torch.compile" in text and "(n=3)" in text


def test_table_from_study_picks_the_best_worst_case_and_loads(tmp_path):
    import json

    from fusedrms import tuning

    recs = []
    for rows, times in ((128, {"ours.current": 5.0, "ours.two_pass_c2048_w16": 4.0}),
                        (1024, {"ours.current": 50.0, "ours.two_pass_c2048_w16": 45.0}),
                        (4096, {"ours.current": 1.0, "ours.two_pass_c2048_w16": 9.0})):  # ignored
        for op in ("fused", "residual"):
            for impl, t in times.items():
                recs.append({"rows": rows, "cols": 8192, "dtype": "bf16", "op": op, "impl": impl,
                             "median_us": t, "correct": True})
    out = study.table_records(recs)
    measured = [o for o in out if o["source"].startswith("capstone study")]
    assert len(measured) == 1 and out[0]["study_name"] == "two_pass_c2048_w16"
    # other keys carried over; float16 takes bfloat16's winner (same element size)
    assert all("previous table" in o["source"] or "bfloat16's winner" in o["source"]
               for o in out[1:])
    fp16 = [o for o in out if o["cols"] == 8192 and o["dtype"] == "float16"]
    assert fp16 and fp16[0]["chunk"] == 2048
    assert out[0]["chunk"] == 2048 and out[0]["num_warps"] == 16
    assert out[0]["worst_ratio_to_best"] == 1.0
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    (study_dir / "timing.json").write_text(json.dumps(
        {"records": recs, "raw": [{"kind": "copy", "gpu": "NVIDIA H200", "GBps": 4200.0}]}))
    (study_dir / "study_summary.json").write_text(json.dumps({"started": "2026-12-01T08:50:00Z"}))
    path = study.write_table(study_dir, tmp_path / "rec")
    table = tuning.check_table("capstone", path)
    assert len(table["configs"]) > 1
    assert table["gpu"] == "NVIDIA H200"
    assert table["configs"][(8192, "bfloat16")] == A.LaunchConfig(1, 16, 1, None, 2048)


def test_fp8_exactness_cost_writes_its_record_without_a_gpu(tmp_path):
    """On a CPU the child exits (no GPU) and ncu is absent: the file still says what happened."""
    import json

    path = study.fp8_exactness_cost(tmp_path, budget_s=30)
    doc = json.loads(path.read_text())
    assert doc["records"] == [] and doc["provenance"]["ncu"]
    assert all(n["status"].startswith(("missing", "skipped", "ok", "rc", "timeout"))
               for n in doc["provenance"]["ncu"])
