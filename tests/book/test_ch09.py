"""Chapter 9's companion: the sweep, the steps and their checks, the aggregation over processes,
and (on a GPU) a smoke run of record(). The readers are tested in test_ch09_page.py."""
import json

import pytest

from fusedrms import traffic
from fusedrms.book import ch09


def test_the_sweep_covers_every_shape_op_and_implementation():
    cs = ch09.cases()
    shapes = {(c["rows"], c["cols"], c["dt"]) for c in cs}
    assert shapes == set(ch09.SHAPES) | set(ch09.WIDE_SHAPES) and len(ch09.SHAPES) == 11
    for op in ch09.OPS:
        assert {c["impl"] for c in cs if c["kind"] == "train" and c["op"] == op} == set(ch09.TRAIN_IMPLS)
    grid = [c for c in cs if (c["rows"], c["cols"], c["dt"]) in ch09.SHAPES]
    assert {(c["op"], c["impl"]) for c in grid if c["kind"] == "backward"} == set(
        ch09.BACKWARD_IMPLS) | {(op, i) for op in ch09.OPS for i in ch09.BACKWARD_PEERS}
    # the rows of 16384 columns: the backward alone, dw first (the rule) and last, and the peers
    wide = [c for c in cs if (c["rows"], c["cols"], c["dt"]) in ch09.WIDE_SHAPES]
    assert {c["kind"] for c in wide} == {"backward"}
    assert {(c["rows"], c["cols"], c["dt"], c["op"], c["impl"]) for c in wide} == {
        (*shape, op, i) for shape in ch09.WIDE_SHAPES for op in ch09.OPS
        for i in (*ch09.WIDE_DESIGNS, *ch09.BACKWARD_PEERS)}
    assert all(c["cols"] == 16384 for c in ch09.cases(smoke=True) if c["impl"] == "dw_last")
    # Liger as it runs by default for RMSNorm (in place) and out of place, in both questions
    assert {"liger", "liger.in_place"} <= set(ch09.TRAIN_IMPLS) & set(ch09.BACKWARD_PEERS)
    sweep = [c for c in cs if c["kind"] == "programs"]
    assert len(sweep) == len(ch09.PROGRAM_SHAPES) * len(ch09.PROGRAMS_PER_SM)
    reduce = [c for c in cs if c["kind"] == "reduce"]
    assert len(reduce) == len(ch09.REDUCE_SHAPES) * len(ch09.REDUCE_TILES)
    assert len(ch09.cases(smoke=True)) < len(cs) / 4


def _part(us_by_impl, rows=4096, cols=4096, dt="bf16", op="rmsnorm", check_ok=True, copy=4000.0):
    nbytes = traffic.training_bytes(op, rows, cols, dt)["total"]
    recs = [{"kind": "train", "op": op, "impl": impl, "rows": rows, "cols": cols, "dtype": dt,
             "bytes": nbytes, "floor_us": nbytes / (copy * 1e3), "us": us, "check_ok": check_ok,
             "check": "ok", "method": "graph"} for impl, us in us_by_impl.items()]
    return {"copy_GBps": copy, "records": recs, "skipped": 0}


def test_aggregate_takes_the_median_of_process_medians_and_their_range():
    parts = [_part({"triton.two_stage": t, "torch.eager": 3 * t}) for t in (10.0, 12.0, 30.0)]
    recs = {r["impl"]: r for r in ch09.aggregate(parts)}
    ours = recs["triton.two_stage"]
    assert (ours["us"], ours["us_min"], ours["us_max"], ours["processes"]) == (12.0, 10.0, 30.0, 3)
    assert ours["pct_floor"] == pytest.approx(100 * ours["floor_us"] / 12.0)


def test_a_failed_case_in_one_process_counts_out_of_that_process_only():
    good = _part({"torch.compile": 20.0})
    bad = _part({"torch.compile": 0.0})
    del bad["records"][0]["us"]
    bad["records"][0]["error"] = "RuntimeError: capture failed"
    rec = ch09.aggregate([good, bad])[0]
    assert rec["processes"] == 1 and rec["us"] == 20.0 and "capture failed" in rec["error"]


@pytest.mark.gpu
def test_record_smoke_writes_checked_records(tmp_path):
    paths = ch09.record(tmp_path, smoke=True)
    doc = json.loads(paths[0].read_text())
    train = [r for r in doc["records"] if r["kind"] == "train"]
    ours = [r for r in train if r["impl"] in ch09.OURS]
    assert ours and all(r.get("check_ok") and r["us"] > 0 for r in ours), ours
    assert any(r["kind"] == "backward" and "us" in r for r in doc["records"])
    det = {r["impl"]: r for r in doc["records"] if r["kind"] == "determinism"}
    assert det["two_stage"]["distinct"] == 1
    assert doc["provenance"]["smoke"] is True


DEVICE = __import__("fusedrms").env.current().device


@pytest.mark.parametrize("impl", ["triton.two_stage", "triton.atomic", "torch.eager",
                                  "torch.rms_norm"])
@pytest.mark.parametrize("op", ch09.OPS)
def test_each_training_step_gives_gradients_that_pass_the_check(impl, op):
    import torch

    bundle = ch09.make_bundle(op, 6, 40, torch.float32, device=DEVICE)
    w = torch.randn(40, device=DEVICE).requires_grad_()
    grads = ch09.train_step(impl, op, 40, torch.float32, w)(bundle)
    assert len(grads) == (2 if op == "rmsnorm" else 3)
    ok, message = ch09.check_gradients(op, bundle, w.detach(), grads)
    assert ok, message
    wrong = list(grads)
    wrong[-1] = wrong[-1] * 1.01  # a dw off by 1 % is caught
    assert not ch09.check_gradients(op, bundle, w.detach(), wrong)[0]


def test_dx_is_checked_on_an_even_sample_of_rows_that_ends_on_the_last():
    from fusedrms.measure.worker import sample_rows

    assert sample_rows(5, ch09.CHECK_ROWS) == [0, 1, 2, 3, 4]
    rows = sample_rows(16384, 2048)
    assert rows[0] == 0 and rows[-1] == 16383 and len(rows) <= 2049
    assert max(b - a for a, b in zip(rows, rows[1:])) <= 9  # no stretch of rows goes unchecked
    odd = sample_rows(1001, 100)
    assert odd[-1] == 1000 and max(b - a for a, b in zip(odd, odd[1:])) <= 11


def test_a_wrong_sampled_row_of_dx_is_caught(monkeypatch):
    import torch

    monkeypatch.setattr(ch09, "CHECK_ROWS", 4)  # 9 rows: 0, 3, 4, 5 and 8 are compared
    bundle = ch09.make_bundle("rmsnorm", 9, 40, torch.float32, device=DEVICE)
    w = torch.randn(40, device=DEVICE).requires_grad_()
    grads = list(ch09.train_step("torch.eager", "rmsnorm", 40, torch.float32, w)(bundle))
    assert ch09.check_gradients("rmsnorm", bundle, w.detach(), grads)[0]
    grads[0] = grads[0].clone()
    grads[0][3] *= 1.01  # row 3 is sampled
    assert not ch09.check_gradients("rmsnorm", bundle, w.detach(), grads)[0]


@pytest.mark.parametrize("op,design", [*ch09.BACKWARD_IMPLS, *((op, "dw_last") for op in ch09.OPS)])
def test_backward_steps_match_the_training_step(op, design):
    import torch

    from fusedrms.kernels import rmsnorm_backward as B

    bundle = ch09.make_bundle(op, 5, 24, torch.float32, device=DEVICE)
    w = torch.randn(24, device=DEVICE)
    full = ch09.train_step("triton.two_stage", op, 24, torch.float32, w.clone().requires_grad_())(bundle)
    _, s, rstd = B.forward(bundle[0], w, ch09.EPS, residual=None if op == "rmsnorm" else bundle[1])
    saved = bundle[:2] if s is None else torch.stack([s, bundle[2], bundle[3]])
    dx, dw = ch09.backward_step(op, design, w, rstd)(saved)
    torch.testing.assert_close(dx, full[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dw, full[-1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", [c for c in ch09.cases(smoke=True)
                                  if c["impl"] not in ("liger", "liger.in_place", "torch.compile")],
                         ids=lambda c: f"{c['kind']}-{c['op']}-{c['impl']}")
def test_measure_case_checks_then_times_each_kind(case, monkeypatch):
    """The GPU path on this machine, the timer replaced: every kind builds its step, the training
    steps pass their gradient check, and the record holds the floor."""
    timed = []

    def fake_timer(step, bundle, nbytes, reps):
        step(bundle)
        timed.append(nbytes)
        return 10.0, "fake timer"

    monkeypatch.setattr(ch09, "time_rotating", fake_timer)
    rec = ch09.measure_case(case["kind"], case["op"], case["impl"], 40, 24, "fp32", 1000.0)
    assert "error" not in rec, rec["error"]
    assert rec["us"] == 10.0 and timed == [rec["bytes"]]
    assert rec["pct_floor"] == pytest.approx(100 * rec["bytes"] / 1e6 / 10.0)
    if case["kind"] == "train":
        assert rec["check_ok"], rec["check"]


@pytest.mark.parametrize("op", ch09.OPS)
def test_the_backward_formula_given_to_torch_compile_is_the_gradient(op):
    import torch

    from fusedrms.kernels import rmsnorm_backward as B

    bundle = ch09.make_bundle(op, 6, 40, torch.float32, device=DEVICE)
    w = torch.randn(40, device=DEVICE)
    add = op == "add_rmsnorm"
    _, s, rstd = B.forward(bundle[0], w, ch09.EPS, residual=bundle[1] if add else None)
    dx, dw = ch09.backward_formula(s if add else bundle[0], w, bundle[-2 if add else 1], rstd,
                                   bundle[3] if add else None)
    grads = (dx, dx, dw) if add else (dx, dw)
    ok, message = ch09.check_gradients(op, bundle, w, grads)
    assert ok, message
    assert not ch09.check_gradients(op, bundle, w, grads[:-1] + (dw * 1.01,))[0]


def test_an_in_place_step_is_checked_and_measured_on_a_copy(monkeypatch):
    """Liger in place writes dx over the bundle's dy: checked on the bundle itself, the check
    would compare with the gradients of a dy the step overwrote."""
    import torch

    real = ch09.train_step

    def in_place_step(impl, op, cols, dtype, w):
        step = real("torch.eager", op, cols, dtype, w)

        def run(bundle):
            grads = step(bundle)
            bundle[1].copy_(grads[0])  # dx over dy, as Liger in place
            return (bundle[1],) + tuple(grads[1:])
        return run

    seen = []
    monkeypatch.setattr(ch09, "train_step", in_place_step)
    monkeypatch.setattr(ch09, "time_rotating", lambda step, bundle, nbytes, reps: (10.0, "fake"))
    monkeypatch.setattr(ch09, "step_peak_MiB", lambda step, bundle: seen.append(bundle) or 1.0)
    rec = ch09.measure_case("train", "rmsnorm", "liger.in_place", 8, 40, "fp32", 1000.0)
    assert rec["check_ok"], rec["check"]
    pristine = ch09.make_bundle("rmsnorm", 8, 40, torch.float32, device=DEVICE)
    assert torch.equal(seen[0], pristine)  # the peak too ran on an untouched copy
    # the same step, not known to write in place, fails its check
    monkeypatch.setattr(ch09, "MUTATES", ())
    rec = ch09.measure_case("train", "rmsnorm", "liger.in_place", 8, 40, "fp32", 1000.0)
    assert rec["check_ok"] is False


def test_a_failing_implementation_becomes_an_error_record(monkeypatch):
    monkeypatch.setattr(ch09, "train_step", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    rec = ch09.measure_case("train", "rmsnorm", "torch.eager", 8, 16, "fp32", 1000.0)
    assert rec["error"] == "RuntimeError: boom" and "us" not in rec


def test_the_warm_up_checks_and_the_timing_processes_only_time(monkeypatch):
    """The float64 check runs once per case, in the warm-up, never again in each timing process."""
    monkeypatch.setattr(ch09, "time_rotating", lambda step, bundle, nbytes, reps: (10.0, "fake"))
    checked = []
    real = ch09.check_gradients
    monkeypatch.setattr(ch09, "check_gradients",
                        lambda *a: checked.append(1) or real(*a))
    warm = ch09.measure_case("train", "rmsnorm", "torch.eager", 8, 16, "fp32", 1000.0,
                             warm_only=True)
    assert warm["check_ok"] and "us" not in warm and checked == [1]
    timed = ch09.measure_case("train", "rmsnorm", "torch.eager", 8, 16, "fp32", 1000.0,
                              check=False)
    assert "check_ok" not in timed and timed["us"] == 10.0 and checked == [1]
    assert timed["case_s"] >= 0


def test_the_gradient_check_compares_where_the_gradients_are(monkeypatch):
    import torch

    from fusedrms import checks

    seen = []
    real = checks.allclose
    monkeypatch.setattr(checks, "allclose", lambda *a, **k: seen.append(k) or real(*a, **k))
    bundle = ch09.make_bundle("add_rmsnorm", 6, 40, torch.float32, device=DEVICE)
    w = torch.randn(40, device=DEVICE).requires_grad_()
    grads = list(ch09.train_step("torch.eager", "add_rmsnorm", 40, torch.float32, w)(bundle))
    assert ch09.check_gradients("add_rmsnorm", bundle, w.detach(), grads)[0]
    assert len(seen) == 3 and all(k.get("on_device") for k in seen)  # dx, dresidual, dw


@pytest.mark.parametrize("workers", [1, 2, 3, 8, 40])
@pytest.mark.parametrize("smoke", [False, True])
def test_the_warm_up_compiles_each_kernel_in_one_process(smoke, workers):
    every = ch09.cases(smoke)
    parts = ch09.warm_parts(every, workers)
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(len(every))) and 1 <= len(parts) <= workers
    assert all(parts)
    owner = {}
    for k, part in enumerate(parts):
        for i in part:
            c = every[i]
            if c["impl"] != "torch.compile":
                assert owner.setdefault((c["op"], c["cols"], c["dt"]), k) == k
    if not smoke and workers == 8:
        # every process owns a kernel key; the 48 cold compiles (the step and the backward alone
        # on the grid, the backward alone at 16384 columns) spread evenly
        assert len(set(owner.values())) == 8
        compiles = [sum(every[i]["impl"] == "torch.compile" for i in p) for p in parts]
        assert sum(compiles) == 48 and max(compiles) - min(compiles) <= 2


def test_the_recorded_stage_two_tile_is_the_librarys():
    from fusedrms.book import ch09_page
    from fusedrms.kernels import rmsnorm_backward as B

    now = ch09.REDUCE_TILES[ch09_page.REDUCE_TILE_NOW]
    assert now == (B.REDUCE_BLOCK_P, B.REDUCE_BLOCK_COLS, B.REDUCE_WARPS)
    assert len(ch09.REDUCE_TILES) == 2  # the tile it had, and the library's


def _fake_sweep(monkeypatch, every, warm):
    """record() with the warm-up returning ``warm`` and the timing processes faked: each times
    every case and checks the indices its spec's ``recheck`` lists. Returns the specs it got."""
    monkeypatch.setattr(ch09, "cases", lambda smoke=False: every)
    monkeypatch.setattr(ch09, "warm_ahead", lambda smoke, workers, log: warm)
    monkeypatch.setattr(ch09, "liger_status", lambda: None)
    monkeypatch.setattr(ch09, "determinism", lambda *a, **k: [])
    monkeypatch.setattr(ch09.env, "require_gpu", lambda *a: None)
    specs = []

    def run(spec, index, log, timeout_s=None):
        specs.append(spec)
        if spec.get("fail_first") and index == 0:
            return None
        recs = []
        for i, c in enumerate(every):
            r = dict(kind=c["kind"], op=c["op"], impl=c["impl"], rows=c["rows"], cols=c["cols"],
                     dtype=c["dt"], bytes=1, floor_us=1.0, us=2.0, method="fake")
            if spec["check"] or i in spec.get("recheck", ()):
                r.update(check_ok=True, check=f"checked in process {index + 1}")
            recs.append(r)
        return {"copy_GBps": 1000.0, "records": recs}

    monkeypatch.setattr(ch09, "_run_process", run)
    return specs


def _train_cases():
    return [dict(kind="train", op="rmsnorm", impl=i, rows=16384, cols=8192, dt="bf16")
            for i in ("triton.two_stage", "torch.eager", "liger")]


def _warm(every):
    """The warm-up checked the first case, raised in the second's check (after its first call)
    and never reached the third."""
    key = [(c["kind"], c["op"], c["impl"], c["rows"], c["cols"], c["dt"]) for c in every]
    base = [dict(kind=c["kind"], op=c["op"], impl=c["impl"], rows=c["rows"], cols=c["cols"],
                 dtype=c["dt"], first_call_ms=1.0) for c in every]
    return {key[0]: dict(base[0], check_ok=True, check="checked in the warm-up"),
            key[1]: dict(base[1], error="OutOfMemoryError: CUDA out of memory")}


def test_cases_the_warm_up_did_not_check_are_checked_by_the_first_timing_process(
        monkeypatch, tmp_path):
    every = _train_cases()
    specs = _fake_sweep(monkeypatch, every, _warm(every))
    logged = []
    path = ch09.record(tmp_path, log=logged.append)[0]
    assert [s.get("recheck") for s in specs] == [[1, 2], None, None]
    assert not any(s["check"] for s in specs)
    doc = json.loads(path.read_text())
    checks = {r["impl"]: r.get("check") for r in doc["records"] if r["kind"] == "train"}
    assert checks == {"triton.two_stage": "checked in the warm-up",
                      "torch.eager": "checked in process 1", "liger": "checked in process 1"}
    assert any("checks the 2 case(s)" in line for line in logged)


def test_a_recheck_moves_to_the_next_process_when_the_first_fails(monkeypatch, tmp_path):
    every = _train_cases()
    specs = _fake_sweep(monkeypatch, every, _warm(every))
    real = ch09._run_process
    monkeypatch.setattr(ch09, "_run_process",
                        lambda spec, index, log, timeout_s=None:
                        real(dict(spec, fail_first=True), index, log, timeout_s))
    with pytest.raises(Exception, match="not timed in all 3 processes"):
        ch09.record(tmp_path, log=lambda line: None)
    assert [s.get("recheck") for s in specs] == [[1, 2], [1, 2], None]
    doc = json.loads((tmp_path / "ch09_backward.json").read_text())
    assert all(r.get("check") == "checked in process 2" for r in doc["records"]
               if r["impl"] != "triton.two_stage")


def test_the_worker_checks_only_the_cases_its_spec_names(monkeypatch):
    every = _train_cases()
    monkeypatch.setattr(ch09, "cases", lambda smoke=False: every)
    monkeypatch.setattr(ch09.env, "require_gpu", lambda *a: None)
    seen = []
    monkeypatch.setattr(ch09, "measure_case", lambda *a, **k: seen.append((a[2], k["check"])) or {})
    from fusedrms.measure import timer
    monkeypatch.setattr(timer, "copy_bandwidth_GBps", lambda: 1000.0)
    ch09.worker({"check": False, "recheck": [2]})
    assert seen == [("triton.two_stage", False), ("torch.eager", False), ("liger", True)]
    seen.clear()
    ch09.worker({"check": True})
    assert [c for _, c in seen] == [True, True, True]
