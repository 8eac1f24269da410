"""fusedrms.verify: the boundary suite catches broken kernels and passes correct ones."""
import json
import math
import re

import pytest
import torch

from fusedrms.book import broken
from fusedrms import checks, env, reference, registry, verify, verify_jobs

ENV = env.current()
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def torch_impl(name, fn, op="rmsnorm", **kw):
    """A test double: an Impl around plain torch code (kernel=True so outputs get poisoned)."""
    return registry.Impl(name, op, fn, "torch", **kw)


def fp32_rmsnorm(x, w, eps):
    y = torch.empty_like(x)  # poisoned by the suite
    y.copy_(reference.rmsnorm(x, w, eps))
    return y


# ---------------------------------------------------------------- the cases

def test_cases_are_named_once_and_say_what_they_catch():
    names = [c.name for c in verify.CASES]
    assert len(names) == len(set(names)) and len({c.short for c in verify.CASES}) == len(names)
    assert all(len(c.catches) > 20 for c in verify.CASES)
    wanted = {"3x13", "33x257", "1024x4096", "1x1", "one column", "all zeros", "w = 0",
              "mixed signs", "huge values", "tiny values", "NaN input", "Inf input",
              "overflow", "eps = 0", "strided rows", "transposed"}
    assert wanted <= set(names)
    assert verify.case("1024x4096").gpu_shape == (1024, 4096)
    with pytest.raises(KeyError, match="known"):
        verify.case("nope")


def test_inputs_do_what_the_cases_promise():
    dev = torch.device("cpu")
    huge = verify.make_inputs(verify.case("huge values"), "rmsnorm", torch.float16, dev, 1)
    assert torch.isinf(huge["x"] * huge["x"]).all()  # squares overflow fp16
    assert (huge["x"].float() + huge["residual"].float()).abs().max() < 65504
    tiny = verify.make_inputs(verify.case("tiny values"), "rmsnorm", torch.float32, dev, 1)
    assert (tiny["x"].double() ** 2).mean(-1).max() < tiny["eps"] / 5
    nan = verify.make_inputs(verify.case("NaN input"), "rmsnorm", torch.float32, dev, 1)
    assert torch.isnan(nan["x"]).sum() == 1 and torch.isnan(nan["x"][1]).any()
    inf = verify.make_inputs(verify.case("Inf input"), "rmsnorm", torch.float32, dev, 1)
    assert torch.isinf(inf["x"]).sum() == 2
    strided = verify.make_inputs(verify.case("strided rows"), "rmsnorm", torch.float32, dev, 1)
    cols = strided["x"].shape[1]
    assert strided["x"].stride() == (2 * cols, 1) and not strided["x"].is_contiguous()
    gap = strided["x"].as_strided((strided["x"].shape[0], cols), (2 * cols, 1), cols)
    assert torch.isnan(gap).all()  # what a kernel reading past its row would pick up
    transposed = verify.make_inputs(verify.case("transposed"), "rmsnorm", torch.float32, dev, 1)
    assert transposed["x"].stride(1) != 1
    zeros = verify.make_inputs(verify.case("all zeros"), "add_rmsnorm", torch.float32, dev, 1)
    assert not zeros["x"].any() and not zeros["residual"].any()
    assert not verify.make_inputs(verify.case("w = 0"), "rmsnorm", torch.bfloat16, dev, 1)["w"].any()


def test_fresh_inputs_per_check_and_reproducible():
    c = verify.case("3x13")
    a = verify.seed_for(0, "triton.row", c.name, torch.float32)
    assert a == verify.seed_for(0, "triton.row", c.name, torch.float32)
    assert len({a, verify.seed_for(0, "triton.row", c.name, torch.float16),
                verify.seed_for(0, "hip.block", c.name, torch.float32),
                verify.seed_for(1, "triton.row", c.name, torch.float32)}) == 4


def test_the_documented_nan_and_inf_propagation():
    """The reference is the policy: a NaN or Inf row, an overflowed row and (eps = 0) an
    underflowed row are NaN, the other rows finite and exact."""
    dev = torch.device("cpu")
    for name in ("NaN input", "Inf input", "overflow", "eps = 0"):
        inp = verify.make_inputs(verify.case(name), "rmsnorm", torch.float32, dev, 3)
        y = reference.rmsnorm(inp["x"], inp["w"], inp["eps"], accum=torch.float64,
                              range_dtype=torch.float32)
        loud = [1, 2] if name == "Inf input" else [1]
        quiet = [r for r in range(y.shape[0]) if r not in loud]
        assert torch.isnan(y[loud]).all(), name
        assert torch.isfinite(y[quiet]).all(), name
    # the same rows in float64's own range are computed: only the kernels' fp32 sum overflows
    inp = verify.make_inputs(verify.case("overflow"), "rmsnorm", torch.float32, dev, 3)
    assert torch.isfinite(reference.rmsnorm(inp["x"], inp["w"], 1e-5, accum=torch.float64)).all()


def test_library_peers_skip_the_loud_cases():
    peer = registry.Impl("t.peer", "rmsnorm", fp32_rmsnorm, "torch", kernel=False)
    for name in ("Inf input", "overflow", "eps = 0"):
        check = verify.run_check(peer, verify.case(name), torch.float32)
        assert check.status == "skip" and "PyTorch" in check.message


def test_a_kernel_that_returns_zeros_for_an_overflowed_row_fails():
    def quiet_overflow(x, w, eps):  # torch's own behaviour: rsqrt(inf) = 0
        xf = x.float()
        r = torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps)
        y = torch.empty_like(x)
        y.copy_((xf * r * w.float()).to(x.dtype))
        return y

    check = verify.run_check(torch_impl("t.quiet", quiet_overflow), verify.case("overflow"),
                             torch.float32)
    assert check.status == "FAIL" and "NaN" in check.message


# ---------------------------------------------------------------- poison and comparison

def test_an_output_the_kernel_never_writes_is_reported():
    lazy = torch_impl("test.lazy", lambda x, w, eps: torch.empty_like(x))
    check = verify.run_check(lazy, verify.case("3x13"), torch.float32)
    assert check.status == "FAIL" and check.unwritten == 39 and "never written" in check.message


def test_out_argument_gets_poisoned_buffers():
    seen = {}

    def half_writer(x, w, eps, out=None):
        seen["poisoned"] = bool(checks.is_poison(out).all())
        out[: x.shape[0] // 2] = reference.rmsnorm(x, w, eps)[: x.shape[0] // 2]
        return out

    check = verify.run_check(torch_impl("test.half", half_writer), verify.case("33x257"),
                             torch.float16)
    assert seen["poisoned"] and check.status == "FAIL" and check.unwritten == 17 * 257


def test_correct_torch_code_passes_every_case_in_every_dtype():
    impl = torch_impl("test.fp32", fp32_rmsnorm)
    cases = [c for c in verify.CASES if c.cpu_shape[1] < 4096]
    results = verify.run([impl], cases=cases)
    assert all(r.ok for r in results), verify.table(results)
    assert {r.dtype for r in results} == {"fp32", "fp16", "bf16"}


def test_add_ops_are_compared_with_their_references():
    def add_rms(x, r, w, eps):
        return reference.add_rmsnorm(x, r, w, eps)

    def add_rms_res(x, r, w, eps):
        return reference.add_rmsnorm_residual(x, r, w, eps)

    def add_rms_rounded_sum(x, r, w, eps):  # rounds x + residual to x's dtype before the norm
        return reference.rmsnorm((x + r), w, eps)

    cases = [verify.case(n) for n in ("3x13", "huge values", "NaN input", "strided rows")]
    for impl in (torch_impl("t.add", add_rms, "add_rmsnorm"),
                 torch_impl("t.res", add_rms_res, "add_rmsnorm_residual")):
        assert all(r.ok for r in verify.run([impl], cases=cases)), impl.name
    wrong = torch_impl("t.wrong", add_rms_rounded_sum, "add_rmsnorm", dtypes=(torch.bfloat16,))
    assert not all(r.ok for r in verify.run([wrong], cases=cases))


def test_a_raising_wrapper_is_one_failed_check():
    def boom(x, w, eps):
        raise RuntimeError("launch failed\nwith detail")

    check = verify.run_check(torch_impl("t.boom", boom), verify.case("1x1"), torch.float32)
    assert check.status == "FAIL" and check.message == "raised RuntimeError: launch failed"


def test_wrong_dtype_output_fails():
    check = verify.run_check(torch_impl("t.f32", lambda x, w, eps: reference.rmsnorm(
        x, w, eps, out_dtype=torch.float32)), verify.case("3x13"), torch.float16)
    assert check.status == "FAIL" and "expected torch.float16" in check.message


def test_unsupported_combinations_are_skipped():
    narrow = torch_impl("t.narrow", fp32_rmsnorm, dtypes=(torch.float32,), max_cols=64)
    assert verify.run_check(narrow, verify.case("33x257"), torch.float32).status == "skip"
    assert verify.run_check(narrow, verify.case("3x13"), torch.float16).status == "skip"
    gpu_only = torch_impl("t.gpu", fp32_rmsnorm, devices=("cuda",), gpu_only_reason="needs sm_89")
    check = verify.run_check(gpu_only, verify.case("3x13"), torch.float32, device="cpu")
    assert check.status == "skip" and check.message == "needs sm_89"


@pytest.mark.parametrize("dtype", DTYPES)
def test_tolerance_is_loose_enough_for_a_real_kernel_across_seeds(dtype):
    """Chapter 4's row kernel (interpreter here: bf16 casts truncate) over many seeds."""
    row = registry.get("triton.row")
    runs = [verify.run_check(row, verify.case("33x257"), dtype, seed=s) for s in range(12)]
    assert all(r.ok for r in runs), [r.message for r in runs if not r.ok]
    assert max(r.max_rel_err / r.rtol for r in runs) < 1.0 and max(r.max_ulp for r in runs) <= 3


# ---------------------------------------------------------------- the broken kernels

def _failing_cases(name, dtype, cases):
    results = verify.run([broken.IMPLS[name]], dtypes=[dtype], cases=[verify.case(c) for c in cases])
    return {r.case for r in results if r.status == "FAIL"}, results


def test_padded_mean_is_caught_only_where_the_width_is_not_a_power_of_two():
    failing, _ = _failing_cases("broken.padded_mean", torch.float32,
                                ("3x13", "33x257", "1x1", "one column", "1024x4096"))
    assert failing == {"3x13", "33x257"}


def test_unmasked_row_is_caught():
    failing, _ = _failing_cases("broken.unmasked_row", torch.float16, ("3x13", "1x1"))
    assert failing == {"3x13"}


def test_inputs_are_followed_by_nan_so_a_read_past_the_end_fails_on_every_run():
    """What lies past an input is NaN, not whatever memory follows: a kernel that reads past a row
    (no mask) gets the same verdict on every run, here on rows whose sum is 0 or whose weight is 0
    (w = 0), where stray finite values used to pass on some runs."""
    for name in ("all zeros", "w = 0", "3x13"):
        inputs = verify.make_inputs(verify.case(name), "rmsnorm", torch.float32, "cpu", seed=1)
        for key in ("x", "w"):
            t = inputs[key]
            after = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())[t.numel():]
            assert t.is_contiguous() and after.numel() > 0 and torch.isnan(after).all(), (name, key)
    for _ in range(3):
        failing, _ = _failing_cases("broken.unmasked_row", torch.float32, ("all zeros", "w = 0"))
        assert failing == {"all zeros", "w = 0"}


@pytest.mark.parametrize("dtype", DTYPES)
def test_fp16_accumulation_is_caught_by_huge_values(dtype):
    failing, results = _failing_cases("broken.fp16_accum", dtype, ("huge values", "all zeros"))
    assert failing == {"huge values"}
    assert any("NaN" in r.message or "outside" in r.message for r in results)


def test_rows_floor_leaves_the_last_odd_row_unwritten():
    failing, results = _failing_cases("broken.rows_floor", torch.bfloat16,
                                      ("3x13", "33x257", "all zeros"))
    assert failing == {"3x13", "33x257"}
    r = next(r for r in results if r.case == "3x13")
    assert r.unwritten == 13 and "rows (2)" in r.message


def test_unmasked_weight_is_invisible_in_the_outputs():
    """The honest limit of output checks: a read past the end that is never stored."""
    failing, _ = _failing_cases("broken.unmasked_weight", torch.float32, ("3x13", "33x257"))
    assert failing == set()


def test_broken_kernels_are_not_in_the_registry():
    names = {i.name for i in registry.impls()}
    assert not names & set(broken.IMPLS)
    assert set(broken.CAUGHT) < set(broken.IMPLS) == set(broken.KERNELS)


# ---------------------------------------------------------------- selection and CLI

def test_lookup():
    all_kernels = verify.lookup("all")
    assert all(i.kernel for i in all_kernels)
    assert {i.name for i in verify.lookup("triton.*")} >= {"triton.row"}
    assert [i.name for i in verify.lookup("broken.padded_mean")] == ["broken.padded_mean"]
    assert len(verify.lookup("triton.row,broken.*")) == 1 + len(broken.IMPLS)
    with pytest.raises(KeyError, match="no implementation matches 'nope'"):
        verify.lookup("nope")


def test_every_registered_kernel_passes_a_quick_case():
    results = verify.run(verify.lookup("all"), dtypes=[torch.float32],
                         cases=[verify.case("3x13")])
    assert results and all(r.status != "FAIL" for r in results), verify.table(results)


def test_cli_pass_and_json(tmp_path, capsys):
    out = tmp_path / "v.json"
    rc = verify.main(["--kernel", "triton.row", "--case", "3x13", "--json", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and lines[-1] == "3 passed, 0 failed"
    doc = json.loads(out.read_text())
    assert doc["provenance"]["summary"] == "3 passed, 0 failed" and doc["provenance"]["complete"]
    assert len(doc["records"]) == 3 and doc["records"][0]["status"] == "pass"
    assert "triton.row" in doc["provenance"]["table"]


def test_cli_fails_on_a_broken_kernel(capsys):
    rc = verify.main(["--kernel", "broken.padded_mean", "--case", "3x13", "--dtype", "fp32"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 1 and out[-1] == "0 passed, 1 failed"
    assert any(line.startswith("FAIL broken.padded_mean fp32 3x13") for line in out)


def test_cli_jobs_runs_routes_in_processes(tmp_path, capsys):
    assert verify_jobs.route_groups(verify.lookup("triton.row,triton.multirow,broken.rows_floor")) == [
        ["triton.row"], ["triton.multirow"], ["broken.rows_floor"]]
    out = tmp_path / "jobs.json"
    rc = verify.main(["--kernel", "triton.row,broken.rows_floor", "--case", "3x13", "--dtype",
                      "fp16", "--jobs", "2", "--json", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 1 and lines[-1] == "1 passed, 1 failed"
    kernels = [r["kernel"] for r in json.loads(out.read_text())["records"]]
    assert kernels == ["triton.row", "broken.rows_floor"]  # the order asked for, not finish order


def test_route_groups_keep_hip_together_and_start_the_slowest_first():
    impls = verify.lookup("all", peers=True)
    groups = verify_jobs.route_groups(impls)
    names = [n for g in groups for n in g]
    assert sorted(names) == sorted(i.name for i in impls)  # every implementation once
    hip = [g for g in groups if any(n.startswith("hip.") for n in g)]
    assert len(hip) == 1 and all(n.startswith("hip.") for n in hip[0])
    assert all(len(g) == 1 for g in groups if g is not hip[0])
    firsts = [g[0] for g in groups]
    assert firsts.index("torch.compile") < firsts.index("bwd.two_stage") < firsts.index(hip[0][0])
    assert firsts.index(hip[0][0]) < firsts.index("triton.row")


def _pairs(impls, dtypes=None):
    return sorted((i.name, verify_jobs._dtype_name(d)) for i in impls for d in i.dtypes
                  if dtypes is None or d in dtypes)


@pytest.mark.parametrize("dtypes", [None, [torch.float32, torch.bfloat16], [torch.float16]])
def test_route_parts_run_every_check_once_and_split_the_per_dtype_compilers(dtypes):
    impls = verify.lookup("all", peers=True)
    by_name = {i.name: i for i in impls}
    parts = verify_jobs.route_parts(impls, jobs=12, dtypes=dtypes)
    ran = sorted((n, d) for p in parts for n in p.names
                 for d in (p.dtypes or [verify_jobs._dtype_name(t) for t in by_name[n].dtypes
                                        if dtypes is None or t in dtypes]))
    assert ran == _pairs(impls, dtypes)  # the parts partition the (implementation, dtype) pairs
    hip = [p for p in parts if p.names[0].startswith("hip.")]
    assert len(hip) == 1 and hip[0].dtypes is None
    assert sorted(hip[0].names) == sorted(n for n in by_name if n.startswith("hip."))
    for name in ("torch.compile", "torch.compile_add", "torch.compile_residual", "bwd.two_stage"):
        mine = [p for p in parts if name in p.names]
        assert all(p.names == (name,) for p in mine)
        if dtypes is None or len(dtypes) > 1:  # each dtype in its own process, once
            assert len(mine) == len(ran_for := [p.dtypes for p in mine]) > 1
            assert all(len(d) == 1 for d in ran_for) and len(set(ran_for)) == len(mine)
        else:  # one dtype asked for: nothing to split
            assert [p.dtypes for p in mine] == [None]
    for p in parts:  # every other implementation alone, all its dtypes in one process
        if not p.names[0].startswith(("hip.", *verify_jobs.SPLIT_BY_DTYPE)):
            assert len(p.names) == 1 and p.dtypes is None


def test_route_parts_start_the_longest_first_and_split_nothing_in_one_process():
    impls = verify.lookup("all")
    parts = verify_jobs.route_parts(impls, jobs=12)
    cost = [len(p.dtypes) if p.dtypes else 1 if p.names[0].startswith("hip.") else
            len(registry.get(p.names[0]).dtypes) for p in parts]
    assert cost == sorted(cost, reverse=True)
    assert parts[0].names == ("triton.row",)  # three dtypes before one backward dtype
    assert [p.names[0] for p in parts].index("bwd.forward") < [p.names[0] for p in parts].index(
        "hip.serial")  # SLOW_FIRST among equals
    alone = verify_jobs.route_parts(impls, jobs=1)
    assert sorted(p.names for p in alone) == sorted(tuple(g) for g in verify_jobs.route_groups(impls))
    assert all(p.dtypes is None for p in alone)


def test_checks_finishing_in_any_order_are_recorded_in_one_process_order():
    impls = verify.lookup("bwd.forward,triton.row")
    cases = [verify.case("3x13"), verify.case("1x1")]  # in CASES order, as the CLI runs them
    single = verify.run(impls, cases=cases)
    shuffled = [single[i] for i in (7, 0, 9, 3, 1, 8, 2, 5, 4, 6, 10, 11, 12, 13)]
    assert sorted(shuffled, key=verify.canonical_order(impls)) == single


def test_cli_jobs_splits_dtypes_with_the_same_records_and_ends_with_the_longest_parts(
        tmp_path, capsys):
    args = ["--kernel", "triton.row,bwd.forward", "--case", "3x13"]
    assert verify.main([*args, "--json", str(tmp_path / "one.json")]) == 0
    capsys.readouterr()
    assert verify.main([*args, "--jobs", "3", "--json", str(tmp_path / "jobs.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    one, jobs = (json.loads((tmp_path / f).read_text()) for f in ("one.json", "jobs.json"))

    def same(doc):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in doc["records"]]
    assert same(jobs) == same(one) and len(same(one)) == 7
    assert jobs["provenance"]["table"] == one["provenance"]["table"]
    assert jobs["provenance"]["matrix"] == one["provenance"]["matrix"]
    assert lines[-1] == "7 passed, 0 failed"
    head = next(i for i, line in enumerate(lines) if line.startswith("longest parts"))
    assert head == len(lines) - 7 and lines[head].startswith("longest parts (5 of 5")
    rows = [re.fullmatch(r" +([\d.]+) s  done at \+ *[\d.]+ s  (.+?)(  \(first in its process\))?",
                         line) for line in lines[head + 1:-1]]
    walls = [float(m.group(1)) for m in rows]
    assert walls == sorted(walls, reverse=True) and any(m.group(3) for m in rows)
    assert sorted(m.group(2) for m in rows) == [
        "bwd.forward bf16", "bwd.forward fp16", "bwd.forward fp32", "bwd.forward torch.float64",
        "triton.row"]


def test_group_times_keep_the_eight_longest_parts():
    parts = [verify_jobs.Part((f"k{i}",)) for i in range(10)]
    text = verify_jobs.group_times([(p, float(i), 10.0 + i, i == 0) for i, p in enumerate(parts)])
    lines = text.splitlines()
    assert lines[0].startswith("longest parts (8 of 10") and len(lines) == 9
    assert [line.split()[-1] for line in lines[1:]] == [f"k{i}" for i in range(9, 1, -1)]
    assert verify_jobs.group_times([(parts[0], float("nan"), 1.0, True), (parts[1], 2.0, 3.0, False)]
                              ).splitlines()[1].split()[-1] == "k1"  # a crashed part last


def test_cli_errors_are_messages(capsys):
    with pytest.raises(SystemExit) as e:
        verify.main(["--kernel", "nope"])
    assert e.value.code == 2 and "no implementation matches" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        verify.main(["--dtype", "fp64"])
    with pytest.raises(SystemExit):
        verify.main(["--case", "nothing like this"])
    if not ENV.on_gpu:
        assert verify.main(["--device", "gpu"]) == 2


def test_a_selection_that_runs_no_check_says_why_and_exits_2(capsys):
    """Issue 26: --kernel fp8.fused --dtype fp16 ran 0 checks and exited 0."""
    with pytest.raises(SystemExit) as e:
        verify.main(["--kernel", "fp8.fused", "--dtype", "fp16"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "usage:" in err
    assert "runs no check" in err and "fp8.fused: takes bf16 only, not fp16" in err
    wide = torch_impl("test.narrow", fp32_rmsnorm, max_cols=8)
    gpu_only = torch_impl("test.gpu", fp32_rmsnorm, devices=("cuda",), gpu_only_reason="needs nvcc")
    assert "test.narrow: rows wider than 8 columns" in verify.why_nothing_runs(
        [wide], cases=[verify.case("33x257")])
    assert verify.why_nothing_runs([gpu_only], on_gpu=False) == "test.gpu: needs nvcc"
    assert verify.why_nothing_runs([wide, gpu_only], cases=[verify.case("1x1")]) == ""


def test_a_json_file_that_cannot_be_written_mid_run_is_an_error_not_a_traceback(
        tmp_path, monkeypatch, capsys):
    from fusedrms import records

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(records, "write", refuse)
    rc = verify.main(["--kernel", "triton.row", "--case", "1x1", "--dtype", "fp32",
                      "--json", str(tmp_path / "v.json")])
    out, err = capsys.readouterr()
    assert rc == 2 and "No space left on device" in err and "Traceback" not in err
    assert out.strip().splitlines()[-1] == "1 passed, 0 failed" and "wrote" not in out


# ---------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_broken_kernels_are_caught_on_the_gpu():
    cases = [verify.case(n) for n in ("3x13", "huge values")]
    for name in broken.CAUGHT:
        results = verify.run([broken.IMPLS[name]], dtypes=[torch.float16], cases=cases)
        assert any(r.status == "FAIL" for r in results), name


@pytest.mark.gpu
def test_row_kernel_passes_the_model_width_on_the_gpu():
    impl = registry.get("triton.row")
    for dtype in DTYPES:
        check = verify.run_check(impl, verify.case("1024x4096"), dtype)
        assert check.ok, check.message
        assert check.max_rel_err <= check.rtol and math.isfinite(check.rel_l2)


# ---------------------------------------------------------------- property-based, every kernel

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KERNEL_NAMES = [i.name for i in verify.lookup("all")]


@settings(derandomize=True, max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(KERNEL_NAMES), rows=st.integers(1, 5), cols=st.integers(1, 300),
       dtype_index=st.integers(0, 2), seed=st.integers(0, 2**16), zero_row=st.booleans())
def test_every_kernel_on_random_shapes(name, rows, cols, dtype_index, seed, zero_row):
    """Random shapes and dtypes through every registered kernel; a zero row must stay zero."""
    impl = registry.get(name)
    dtype = impl.dtypes[dtype_index % len(impl.dtypes)]
    if not impl.supports(ENV.device.type, dtype, cols):
        return
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    if zero_row:
        x[rows // 2] = 0
    inputs = {"x": x.to(dtype).to(ENV.device), "residual": torch.zeros(rows, cols, dtype=dtype,
                                                                        device=ENV.device),
              "w": torch.randn(cols, generator=g).to(dtype).to(ENV.device), "eps": 1e-5}
    if impl.op in registry.BACKWARD_OPS:  # chapter 9: output gradients too
        inputs["dy"] = torch.randn(rows, cols, generator=g).to(dtype).to(ENV.device)
        inputs["d_sum"] = torch.zeros_like(inputs["dy"])
    result = verify.launch(impl, inputs)
    report, _ = verify.compare(impl.op, inputs, result)
    assert report, f"{name} {dtype} {rows}x{cols}: {report}"
    if zero_row and impl.op not in ("rmsnorm_fp8", *registry.BACKWARD_OPS):
        y = result[0] if isinstance(result, tuple) else result
        assert not y[rows // 2].any()


def test_budget_use_table():
    results = verify.run([registry.get("triton.row")], cases=[verify.case("3x13")])
    text = verify.budget_use(results)
    lines = text.splitlines()
    assert lines[0].split() == ["kernel", "fp32", "fp16", "bf16"] and lines[1].startswith("triton.row")
    shares = [float(v) for v in lines[1].split()[1:]]
    assert all(0 <= v < 1 for v in shares)
    assert verify.budget_use([r.record() for r in results]) == text
    fp8 = verify.run([registry.get("fp8.fused")], cases=[verify.case("3x13")])
    assert verify.budget_use(fp8).splitlines()[1].split() == ["fp8.fused", "-", "-", "exact"]


def test_budget_use_with_failures_shows_shares_above_one():
    results = verify.run(verify.lookup("broken.fp16_accum"), dtypes=[torch.float32],
                         cases=[verify.case("3x13"), verify.case("huge values")])
    assert verify.budget_use(results).splitlines()[1:] == []  # nothing passed
    line = verify.budget_use(results, failed=True).splitlines()[1].split()
    assert line[0] == "broken.fp16_accum" and float(line[1]) > 1.0  # NaN (huge) is never counted
