"""Chapter 5's companion (fusedrms.book.ch05): the readers of the recorded suite runs."""
import torch

from fusedrms import env, records, verify
from fusedrms.book import broken, ch05

ENV = env.current()


def _rec(kernel, case, dtype, status, op="rmsnorm", rel=1e-3, rtol=2e-3):
    return dict(kernel=kernel, case=case, dtype=dtype, status=status, op=op,
                max_rel_err=rel, rtol=rtol, message="")


def test_matrix_and_tolerance_shares():
    recs = [_rec("k", "3x13", "fp32", "pass"), _rec("k", "3x13", "fp16", "FAIL"),
            _rec("k", "1x1", "fp32", "skip"), _rec("k", "1x1", "fp16", "skip"),
            _rec("q", "3x13", "fp32", "FAIL"), _rec("q", "3x13", "fp16", "FAIL"),
            _rec("q", "1x1", "fp32", "pass"), _rec("q", "1x1", "fp16", "pass"),
            _rec("f", "3x13", "bf16", "pass", op="rmsnorm_fp8")]
    rows = {r["kernel"]: r for r in ch05.matrix_rows(recs)}
    assert rows["k"]["3x13"] == "16" and rows["k"]["1x1"] == "-"
    assert rows["q"]["3x13"] == "all" and rows["q"]["1x1"] == "ok"
    budget = {r["kernel"]: r for r in ch05.tolerance_shares(recs)}
    assert budget["k"]["fp32"] == 0.5 and budget["k"]["fp16"] is None  # failed checks left out
    assert budget["f"]["exact"] and budget["f"]["bf16"] is None


def test_suite_summary_and_caught():
    doc = {"provenance": {"commit": "abc"}, "records": [
        _rec("k", "3x13", "fp32", "pass"), _rec("k", "1x1", "fp32", "skip"),
        _rec("broken.x", "3x13", "fp32", "FAIL")]}
    s = ch05.suite_summary(doc)
    assert (s["kernels"], s["checks"], s["passed"], s["failed"], s["skipped"]) == (2, 3, 1, 1, 1)
    assert s["commit"] == "abc" and s["complete"]
    assert ch05.caught(doc) == {"broken.x": True, "k": False}
    assert ch05.suite_summary(None) is None and ch05.caught(None) is None


def test_readers_on_the_committed_recording():
    for name in ("verify_gpu", "verify_broken_gpu"):
        try:
            doc = records.load(name)
        except FileNotFoundError:
            continue
        assert ch05.matrix_rows(doc["records"])
        assert ch05.suite_summary(doc)["checks"] == len(doc["records"])


def test_fp8_cast_mismatch_is_the_number_chapter_8_measures():
    got = ch05.fp8_cast_mismatch()
    if got is None:  # a GPU whose Triton has no e4m3 conversion
        assert ENV.on_gpu
        return
    differ, n = got
    assert n == 1 << 16
    if ENV.on_gpu:
        assert differ == 0  # a GPU with FP8 conversions casts exactly
    else:
        assert 0.01 < differ / n < 0.05  # the interpreter's emulation (about 2.35 %)


def test_the_drawer_on_this_machine_is_caught():
    results = verify.run([broken.IMPLS[n] for n in broken.CAUGHT], dtypes=[torch.float32],
                         cases=[verify.case("3x13"), verify.case("1x1")])
    assert {r.kernel for r in results if r.status == "FAIL"} == set(broken.CAUGHT)
