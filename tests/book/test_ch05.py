"""Chapter 5's companion (fusedrms.book.ch05): the readers of the recorded suite runs."""
import warnings

import torch

from fusedrms import env, records, validation, verify
from fusedrms.book import broken, ch05
from fusedrms.kernels import rmsnorm as T

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


def test_matrix_tables_split_the_cases_into_shape_and_value_tables_with_every_kernel():
    recs = [_rec(k, c, "fp32", "pass") for k in ("a", "b")
            for c in ("3x13", "transposed", "NaN input", "eps = 0")]
    shapes, values = ch05.matrix_tables(recs, caption="The matrix").tables
    assert shapes.columns == ["kernel", "3x13", "transp"] and shapes.caption.startswith("The matrix")
    assert values.columns == ["kernel", "NaN", "eps=0"]
    assert [r[0] for r in shapes.rows] == [r[0] for r in values.rows] == ["a", "b"]
    html = ch05.matrix_tables(recs, caption="The matrix")._repr_html_()
    assert html.count("<table") == 2 and "The same kernels" in html


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


# ---- what the page tells a reader to look for in this machine's results ----

def test_the_loud_rows_are_the_ones_the_page_names():
    """The page: with eps = 1e-5 row 1 (just past the overflow) is NaN; with eps = 0 row 2 (all
    zeros) is too; the ordinary row 0 never is."""
    x = torch.ones(3, 4096, device=ENV.device)
    x[1] *= 1.01 * validation.overflow_rms(4096)
    x[2] = 0.0
    w = torch.ones(4096, device=ENV.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for eps, want in ((1e-5, [1]), (0.0, [1, 2])):
            y = T.rmsnorm_row(x, w, eps)
            assert [i for i in range(3) if torch.isnan(y[i]).all()] == want
            assert torch.isfinite(y[0]).all()


def test_shrunk_cases_name_each_case_a_cpu_runs_smaller():
    names = ch05.shrunk_cases(verify.CASES)
    assert len(names) > 1 and len(set(names)) == len(names)  # "N cases shrink"
    assert "1024x4096" in names and "3x13" not in names
    assert ch05.shrunk_cases([c for c in verify.CASES if c.name not in names]) == []


def _broken_doc(statuses):
    return {"records": [_rec(k, "3x13", "fp32", s) for k, s in statuses.items()]}


def test_drawer_on_gpu_counts_only_the_kernels_the_chapter_shows():
    statuses = {k: "FAIL" for k in broken.CAUGHT}
    statuses["broken.unmasked_weight"] = "pass"
    drawer = ch05.drawer_on_gpu(_broken_doc(statuses), broken.SHOWN)
    assert "broken.unbiased_mean" not in {r["kernel"] for r in drawer["records"]}
    wrong = [k for k in broken.SHOWN if k in broken.CAUGHT]
    assert drawer["wrong"] == wrong and drawer["caught"] == wrong
    assert drawer["silent"] == {"broken.unmasked_weight": True}
    statuses.update({"broken.rows_floor": "pass", "broken.unmasked_weight": "FAIL"})
    drawer = ch05.drawer_on_gpu(_broken_doc(statuses), broken.SHOWN)
    assert "broken.rows_floor" not in drawer["caught"] and len(drawer["caught"]) == len(wrong) - 1
    assert drawer["silent"] == {"broken.unmasked_weight": False}
    assert ch05.drawer_on_gpu(None, broken.SHOWN) is None
    assert ch05.drawer_on_gpu({"records": []}, broken.SHOWN) is None


def test_matrix_differences_over_shared_cells():
    a = [{"kernel": "k", "3x13": "ok", "1x1": "all"}, {"kernel": "q", "3x13": "ok"}]
    b = [{"kernel": "k", "3x13": "32", "1x1": "all", "zeros": "ok"}]
    assert ch05.matrix_differences(a, b) == 1 and ch05.matrix_differences(a, a) == 0


def test_kernel_rows_list_the_failing_cases():
    recs = [_rec("k", "3x13", "fp32", "pass"), _rec("k", "1x1", "fp32", "FAIL"),
            _rec("k", "1x1", "fp16", "FAIL"), _rec("k", "zeros", "fp16", "skip")]
    assert ch05.kernel_rows(recs) == [{"kernel": "k", "checks": 3, "passed": 1,
                                       "failing cases": "1x1"}]
    assert ch05.kernel_rows([_rec("q", "3x13", "fp32", "pass")])[0]["failing cases"] == "none"


def test_the_matrix_key_names_every_short_dtype():
    assert ch05.MATRIX_KEY == "32 = fp32, 16 = fp16, b16 = bf16"


def test_a_suite_runs_beside_the_recording_and_is_stopped_at_its_limit():
    from fusedrms.book import ch05

    done = ch05._finish(ch05._start_verify(["--kernel", "triton.row", "--case", "3x13",
                                            "--dtype", "fp32"]), 120)
    assert done.returncode == 0 and done.stdout.strip().endswith("1 passed, 0 failed")
    stopped = ch05._finish(ch05._start_verify(["--kernel", "all"]), 1)
    assert stopped.returncode != 0 and "stopped at its limit of 1 s" in stopped.stderr
