"""The performance study's parent on the CPU: the aggregation finds the fastest peer, the entry
point refuses cleanly without a GPU, the parent writes its files when its children fail, and a
study becomes a tuning table."""
import pytest

from fusedrms import env
from fusedrms.book import study
from fusedrms.kernels import add_rmsnorm as A


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



def test_children_compile_with_one_thread_unless_told_otherwise(tmp_path, monkeypatch):
    import subprocess

    seen = []

    class FakeProc:
        stdout, returncode = iter(()), 0

        def __init__(self, cmd, **kw):
            seen.append(kw["env"])

        def wait(self):
            return 0

        def kill(self):
            pass

    monkeypatch.setattr(subprocess, "Popen", FakeProc)
    log = tmp_path / "log.txt"
    study._run_child(["timing"], study.time.time() + 5, log, {"A": "1"})
    study._run_child(["timing"], study.time.time() + 5, log, {"TORCHINDUCTOR_COMPILE_THREADS": "4"})
    assert seen[0] == {"A": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    assert seen[1]["TORCHINDUCTOR_COMPILE_THREADS"] == "4"


def test_ncu_profiles_the_call_after_the_warm_up(tmp_path, monkeypatch):
    """ncu sees only the call between cudaProfilerStart and Stop: never a launch counted from the
    process start, which can be one of Inductor's autotuning candidates."""
    import os
    import time

    fake = tmp_path / "ncu"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/args\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    got = study.run_ncu(tmp_path, time.time() + 60, dict(os.environ), targets=("ours", "inductor"))
    assert [g["status"] for g in got] == ["ok", "ok"]
    lines = (tmp_path / "args").read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert "--profile-from-start off" in line and "--launch-skip" not in line
        assert "--launch-count 1" in line and "ncu-target" in line
