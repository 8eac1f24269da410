"""The study's FP8 step on the CPU: the exact kernel reproduces the reference codes, and every
variant reports a result."""
import json

from fusedrms.book import study_fp8, study_timing


def _messages(capsys):
    return [json.loads(line[2:]) for line in capsys.readouterr().out.splitlines()
            if line.startswith(study_timing.TAG)]


def test_fp8_worker_on_cpu(capsys, tmp_path):
    import time

    study_fp8.run_fp8_worker(tmp_path, time.time() + 300, device="cpu", shapes=((3, 256),))
    got = {m["impl"]: m for m in _messages(capsys) if m["kind"] == "fp8"}
    exact = got["fp8.fused_exact"]  # the exact contract, against the exact reference
    assert exact["status"] == "ok" and exact["differing_codes"] == 0
    for name in ("fp8.fused_baseline", "fp8.approx_w8"):
        assert got[name]["status"] == "ok", got[name]



def test_fp8_worker_prices_each_lever_at_the_deepseek_width(capsys, tmp_path):
    import time

    study_fp8.run_fp8_worker(tmp_path, time.time() + 300, device="cpu", shapes=((1, 7168),),
                             rounds=1)
    got = {m["impl"]: m for m in _messages(capsys) if m["kind"] == "fp8"}
    assert set(study_fp8.LEVERS) <= set(got)
    for name, (_, stated) in study_fp8.LEVERS.items():
        rec = got[name]
        assert rec["status"] == "ok" and len(rec["round_us"]) == 1, rec
        # every departure with a stated form equals it bit for bit; the rest state none
        assert rec.get("own_spec_ok") is (True if stated is not None else None), rec
    assert got["lever.none"]["differing_codes"] == 0
    assert got["lever.pairwise_reciprocal"]["own_spec_ok"] is True  # the served contract
