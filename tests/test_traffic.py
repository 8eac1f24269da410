"""The static traffic model: the numbers the book states, its conventions, its CLI and its errors."""
import math
import subprocess
import sys
from fractions import Fraction

import pytest
import torch

from fusedrms import traffic
from fusedrms.traffic import TrafficError, price

H200_GBPS = traffic.PUBLISHED["H200 SXM"][0]


# ---- the numbers the book states ----

def test_eager_chain_is_seven_row_trips_fused_three_residual_four():
    assert price("eager_add_rmsnorm", 4096, 4096).row_trips == 7
    assert price("fused_add_rmsnorm", 4096, 4096).row_trips == 3
    assert price("fused_add_rmsnorm_residual", 4096, 4096).row_trips == 4
    assert price("eager_add_rmsnorm", 1, 8).launches == 3
    assert price("fused_add_rmsnorm", 1, 8).launches == 1


def test_pytorchs_two_kernels_are_five_row_trips():
    """What a reader writes, F.rms_norm(x + r, (cols,), w): chapter 2's baseline."""
    e = price("torch_add_rmsnorm", 4096, 4096)
    assert e.row_trips == 5 and e.launches == 2  # row-trips leave the weight out
    assert traffic.speedup_bound("torch_add_rmsnorm", "fused_add_rmsnorm") == Fraction(5, 3)
    assert traffic.speedup_bound("torch_add_rmsnorm", "fused_add_rmsnorm_residual") == Fraction(5, 4)


def test_speedup_bound_is_seven_thirds():
    assert traffic.speedup_bound("eager_add_rmsnorm", "fused_add_rmsnorm") == Fraction(7, 3)
    # at a finite shape the weight (read once per kernel) pulls the ratio just below 7/3
    finite = traffic.speedup_bound("eager_add_rmsnorm", "fused_add_rmsnorm", rows=4096)
    assert finite < Fraction(7, 3) and float(finite) == pytest.approx(7 / 3, rel=1e-3)


def test_fp8_example_reproduces_the_published_analysis():
    naive = price("rmsnorm_fp8_naive", 2, 7168, "bf16", bandwidth_GBps=4800, block=128)
    fused = price("rmsnorm_fp8_fused", 2, 7168, "bf16", bandwidth_GBps=4800, block=128)
    assert (naive.bytes_read, naive.bytes_written) == (71680, 43456)
    assert (fused.bytes_read, fused.bytes_written) == (43008, 14784)
    assert (naive.ideal_ns, fused.ideal_ns) == (24, 13)
    assert naive.launches == 2 and fused.launches == 1
    # the difference is exactly the normalized rows written and read back (2 x 7168 bf16)
    assert naive.bytes_read - fused.bytes_read == 2 * 7168 * 2
    assert naive.bytes_written - fused.bytes_written == 2 * 7168 * 2


def test_fp8_bytes_from_first_principles():
    rows, cols, block = 2, 7168, 128
    x, gamma = rows * cols * 2, cols * 2
    codes, scales = rows * cols * 1, rows * (cols // block) * 4
    fused = price("rmsnorm_fp8_fused", rows, cols, torch.bfloat16, block=block)
    assert fused.bytes_read == x + gamma and fused.bytes_written == codes + scales
    # a block width that does not divide the row: the last, partial block still gets a scale
    partial = price("rmsnorm_fp8_fused", 1, 200, block=128)
    assert partial.bytes_written == 200 + 2 * 4


def test_ideal_time_rounds_once_not_per_kernel():
    naive = price("rmsnorm_fp8_naive", 2, 7168, bandwidth_GBps=4800)
    per_kernel_ceil = sum(math.ceil(k.time_ns) for k in naive.kernels)
    assert per_kernel_ceil == 25 and naive.ideal_ns == 24
    assert naive.exact_ns == Fraction(115136, 4800)


# ---- conventions ----

def test_weight_counts_once_per_kernel_that_reads_it_not_per_row():
    one = price("rmsnorm", 1, 4096, "fp32")
    many = price("rmsnorm", 1000, 4096, "fp32")
    assert one.bytes_read == 4096 * 4 * 2
    assert many.bytes_read == 1000 * 4096 * 4 + 4096 * 4
    # the unfused design reads w only in its last kernel
    unfused = price("rmsnorm_unfused", 10, 64, "fp32")
    assert [any(t == "w" for t, _ in k.reads) for k in unfused.kernels] == [False, False, True]


def test_unfused_rmsnorm_materializes_squares_and_row_sums():
    rows, cols = 8, 64
    e = price("rmsnorm_unfused", rows, cols, "bf16")
    sq, sums, x, w = rows * cols * 4, rows * 4, rows * cols * 2, cols * 2
    assert e.bytes_read == x + sq + x + sums + w
    assert e.bytes_written == sq + sums + x
    assert e.launches == 3


def test_fusion_keeps_flops_and_changes_only_bytes():
    for a, b in [("eager_add_rmsnorm", "fused_add_rmsnorm"), ("torch_add_rmsnorm", "fused_add_rmsnorm"),
                 ("rmsnorm_unfused", "rmsnorm"),
                 ("rmsnorm_fp8_naive", "rmsnorm_fp8_fused")]:
        ea, eb = price(a, 64, 1024), price(b, 64, 1024)
        assert ea.flops == eb.flops, (a, b)
        assert ea.bytes_total > eb.bytes_total


def test_two_pass_designs_reread_the_row():
    assert price("rmsnorm", 16, 1 << 16).row_trips == 2
    assert price("rmsnorm_two_pass", 16, 1 << 16).row_trips == 3
    assert price("add_rmsnorm_two_pass", 16, 1 << 16).row_trips == 5
    assert price("add_rmsnorm_residual_two_pass", 16, 1 << 16).row_trips == 5
    split = price("rmsnorm_split_row", 4, 1 << 16, "fp32", chunk_cols=4096)
    assert split.launches == 2
    partials = 4 * 16 * 4
    assert split.bytes_total == 3 * 4 * (1 << 16) * 4 + 2 * partials + (1 << 16) * 4


def test_intensity_and_bound():
    e = price("fused_add_rmsnorm", 4096, 4096, "bf16", H200_GBPS, 67.0)
    assert e.intensity == pytest.approx(e.flops / e.bytes_total)
    assert e.bound == "memory" and e.intensity < e.ridge
    assert price("rmsnorm", 4, 8).bound is None and price("rmsnorm", 4, 8, bandwidth_GBps=1).bound is None
    assert price("rmsnorm", 4, 8).ideal_ns is None
    # a tiny peak makes the same design compute-bound, and the time follows the FLOPs
    slow = price("rmsnorm", 4096, 4096, "bf16", H200_GBPS, peak_tflops=0.01)
    assert slow.bound == "compute"
    assert slow.ideal_ns == math.ceil(Fraction(slow.flops) / Fraction(10))


def test_dtype_spellings_agree():
    ref = price("rmsnorm", 3, 100, "bf16").bytes_total
    for d in ("bfloat16", torch.bfloat16, "BF16", "fp16", torch.float16):
        assert price("rmsnorm", 3, 100, d).bytes_total == ref
    assert price("rmsnorm", 3, 100, torch.float32).bytes_total == 2 * ref


def test_floor_us_prices_the_ops_best_design():
    us = traffic.floor_us("add_rmsnorm", 4096, 4096, torch.bfloat16, 4000.0)
    assert us == pytest.approx((3 * 4096 * 4096 * 2 + 4096 * 2) / 4000.0 / 1000)
    assert set(traffic.OP_STEP.values()) <= set(traffic.STEPS)


def test_str_of_a_step_is_its_description_and_estimates_print_a_table():
    assert str(traffic.STEPS["rmsnorm"]).startswith("RMSNorm")
    text = str(price("rmsnorm_fp8_naive", 2, 7168, bandwidth_GBps=4800))
    assert "71,680" in text and "43,456" in text and "ideal 24 ns" in text
    assert "rmsnorm_fp8_fused" in traffic.compare([price("rmsnorm_fp8_fused", 2, 7168)])


def test_a_custom_step_is_priced_by_the_same_rules():
    s = traffic.Step("copy", "read x, write y", {"x": traffic.Tensor(("rows", "cols")),
                                                 "y": traffic.Tensor(("rows", "cols"), "fp32")},
                     (traffic.Kernel("copy", ("x",), ("y",)),))
    e = price(s, 10, 10, "bf16")
    assert (e.bytes_read, e.bytes_written, e.row_trips) == (200, 400, 3)
    with pytest.raises(TrafficError, match="does not declare"):
        traffic.Step("bad", "", {}, (traffic.Kernel("k", ("x",), ()),))


# ---- errors a reader can cause ----

@pytest.mark.parametrize("kwargs, match", [
    (dict(step="rmsnrom"), "Did you mean rmsnorm"),
    (dict(dtype="int4"), "unknown dtype"),
    (dict(dtype="fp8"), "not an activation dtype"),
    (dict(rows=0), "rows must be at least 1"),
    (dict(cols=2.5), "cols must be a whole number"),
    (dict(bandwidth_GBps=-1), "bandwidth_GBps must be positive"),
    (dict(bandwidth_GBps="fast"), "must be a number"),
    # issue 26: OverflowError, or accepted
    (dict(rows=float("inf")), "rows must be a whole number"),
    (dict(rows=10 ** 400), "rows must be at most .* 401 digits"),
    (dict(rows="3"), r"rows must be a whole number such as 4096, got '3' \(str\)"),
    (dict(cols=True), r"cols must be a whole number such as 4096, got True \(bool\)"),
    (dict(rows=2 ** 62, cols=4), "a tensor holds at most"),
    (dict(bandwidth_GBps=float("inf")), "bandwidth_GBps must be from 1e-06 to 1e\\+12"),
    (dict(bandwidth_GBps=1e-320), "bandwidth_GBps must be from"),
    (dict(bandwidth_GBps=10 ** 400), "bandwidth_GBps must be from .* 401 digits"),
    (dict(bandwidth_GBps=True), "bandwidth_GBps must be a number, got True"),
    (dict(bandwidth_GBps=4800, peak_tflops=1e-320), "peak_tflops must be from"),
])
def test_errors_say_what_to_do(kwargs, match):
    args = dict(step="rmsnorm", rows=4, cols=8, dtype="bf16")
    args.update(kwargs)
    with pytest.raises(TrafficError, match=match):
        price(args.pop("step"), **args)
    with pytest.raises(TrafficError, match="known ops"):
        traffic.floor_us("layernorm", 1, 1, "bf16", 1.0)


def test_the_largest_accepted_sizes_and_rates_still_print_finite_numbers():
    e = price("rmsnorm_backward", 2 ** 31, 2 ** 31, "fp32", bandwidth_GBps=traffic.RATE_RANGE[0],
              peak_tflops=traffic.RATE_RANGE[0])
    assert math.isfinite(e.ideal_us) and "ideal" in str(e)
    assert price("rmsnorm", 4.0, 8).rows == 4  # a whole-number float is still a whole number


# ---- bandwidths ----

def test_published_table_is_complete_and_cited():
    for name, (bw, peak, key) in traffic.PUBLISHED.items():
        assert bw > 0 and peak > 0 and key, name
    assert traffic.PUBLISHED["H200 SXM"][0] == 4800.0
    assert traffic.published_for("NVIDIA H200") == "H200 SXM"
    assert traffic.published_for("AMD Radeon RX 9070 XT") == "RX 9070 XT"
    assert traffic.published_for("Some Future GPU") is None


def test_published_sources_are_in_the_bibliography():
    from pathlib import Path

    bib = Path(__file__).resolve().parents[1] / "book" / "references.bib"
    if not bib.exists():
        pytest.skip("book/references.bib not written yet")
    text = bib.read_text()
    for _, _, key in traffic.PUBLISHED.values():
        assert "{" + key + "," in text, key


def test_reader_bandwidth_without_gpu_is_the_published_h200_figure():
    from fusedrms import env

    if env.current().on_gpu:
        pytest.skip("this machine has a GPU")
    assert traffic.reader_bandwidth_GBps() == (4800.0, "published H200 figure")
    assert traffic.reader_ceilings()["peak_tflops"] == 67.0


@pytest.mark.gpu
def test_reader_bandwidth_is_measured_on_a_gpu():
    value, source = traffic.reader_bandwidth_GBps()
    assert source == "measured", "fusedrms.measure.timer.copy_bandwidth_GBps failed (see stderr)"
    assert 50 < value < 20000


# ---- command line ----

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "fusedrms.traffic", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli_prices_and_compares():
    out = _cli("rmsnorm_fp8_naive", "rmsnorm_fp8_fused", "--rows", "2", "--cols", "7168",
               "--dtype", "bf16", "--bandwidth", "4800")
    assert out.returncode == 0, out.stderr
    assert "ideal 24 ns" in out.stdout and "ideal 13 ns" in out.stdout
    assert "speedup bound" in out.stdout


def test_cli_lists_steps_and_rejects_unknown_names_cleanly():
    listing = _cli("--list")
    assert listing.returncode == 0 and all(name in listing.stdout for name in traffic.STEPS)
    bad = _cli("fused_rmsnorm")
    assert bad.returncode == 2 and "unknown step" in bad.stderr and "Traceback" not in bad.stderr
    bad = _cli("rmsnorm", "--dtype", "fp64")
    assert bad.returncode == 2 and "unknown dtype" in bad.stderr and "Traceback" not in bad.stderr
    bad = _cli("rmsnorm", "--gpu", "B200")
    assert bad.returncode == 2 and "unknown --gpu" in bad.stderr
    assert _cli().returncode == 2


def _pretend_gpu(monkeypatch, gpu_name, copy):
    """Run reader_bandwidth_GBps as if on a GPU, with a stand-in for fusedrms.measure.timer."""
    import types

    import fusedrms.measure
    from fusedrms import env

    fake_env = env.Env("cuda", torch.device("cpu"), gpu_name, "compiled for the GPU", "nvcc",
                       {"torch": torch.__version__, "python": "3"})
    monkeypatch.setattr(env, "_CURRENT", fake_env)
    timing = types.SimpleNamespace(copy_bandwidth_GBps=copy)
    monkeypatch.setattr(fusedrms.measure, "timer", timing, raising=False)
    monkeypatch.setitem(sys.modules, "fusedrms.measure.timer", timing)
    monkeypatch.setattr(traffic, "_MEASURED", None)


def test_reader_bandwidth_measures_once_on_a_gpu(monkeypatch):
    calls = []
    _pretend_gpu(monkeypatch, "NVIDIA H100 80GB HBM3", lambda: calls.append(1) or 3000.0)
    assert traffic.reader_bandwidth_GBps() == (3000.0, "measured")
    assert traffic.reader_bandwidth_GBps() == (3000.0, "measured") and len(calls) == 1
    ceilings = traffic.reader_ceilings()
    assert ceilings["peak_tflops"] == traffic.PUBLISHED["H100 SXM"][1]
    assert ceilings["peak_source"] == "nvidia_h100"


def test_reader_bandwidth_falls_back_when_measuring_fails(monkeypatch, capsys):
    def broken():
        raise RuntimeError("out of memory")

    _pretend_gpu(monkeypatch, "Tesla T4", broken)
    assert traffic.reader_bandwidth_GBps() == (320.0, "published T4 figure")
    assert "out of memory" in capsys.readouterr().err
    _pretend_gpu(monkeypatch, "Some Future GPU", broken)
    assert traffic.reader_bandwidth_GBps() == (4800.0, "published H200 figure")
    assert traffic.reader_ceilings()["peak_tflops"] is None


# ---------------------------------------------------------------- the backward (chapter 9)

def test_backward_bytes_follow_the_tensors_it_touches():
    rows, cols, programs = 4096, 4096, 264
    e = traffic.price("rmsnorm_backward", rows, cols, "bf16", programs=programs)
    matrix, partials = rows * cols * 2, programs * cols * 4
    # x, dy, w and r read; dx and the partials written; stage 2 reads the partials, writes dw
    assert e.bytes_read == 2 * matrix + cols * 2 + rows * 4 + partials
    assert e.bytes_written == matrix + partials + cols * 2
    assert e.launches == 2 and float(e.row_trips) == pytest.approx(3, abs=1e-3)


def test_saving_r_costs_four_bytes_per_row_and_recomputing_costs_flops():
    save = traffic.price("rmsnorm_backward", 1024, 2048, "bf16")
    again = traffic.price("rmsnorm_backward_recompute", 1024, 2048, "bf16")
    forward = traffic.price("rmsnorm_train_forward", 1024, 2048, "bf16")
    plain = traffic.price("rmsnorm", 1024, 2048, "bf16")
    assert save.bytes_total - again.bytes_total == 1024 * 4  # the backward reads r
    assert forward.bytes_total - plain.bytes_total == 1024 * 4  # the forward writes it
    assert again.flops - save.flops == 1024 * 2048 * traffic.SUMSQ + 1024 * traffic.ROW_STAT


def test_partials_traffic_does_not_grow_with_rows():
    small = traffic.price("rmsnorm_backward", 1024, 2048, "bf16")
    big = traffic.price("rmsnorm_backward", 16384, 2048, "bf16")
    partials = 2 * 264 * 2048 * 4
    assert partials / small.bytes_total == pytest.approx(0.2554, abs=1e-3)
    assert partials / big.bytes_total < 0.025
    # never more programs than rows
    assert traffic.price("rmsnorm_backward", 10, 2048, "bf16").bytes_total == \
        traffic.price("rmsnorm_backward", 10, 2048, "bf16", programs=10).bytes_total


def test_fused_backward_bound_against_eager_autograd():
    # row-trips: 13 against 3 and 16 against 4 (r and the row dot products add a few per mille)
    assert float(traffic.speedup_bound("rmsnorm_backward_unfused", "rmsnorm_backward")) == \
        pytest.approx(13 / 3, rel=2e-3)
    assert float(traffic.speedup_bound("add_rmsnorm_backward_unfused", "add_rmsnorm_backward")) == \
        pytest.approx(16 / 4, rel=2e-3)
    atomic = traffic.price("rmsnorm_backward_atomic", 4096, 4096, "bf16")
    two_stage = traffic.price("rmsnorm_backward", 4096, 4096, "bf16")
    assert two_stage.bytes_total - atomic.bytes_total == 264 * 4096 * 4 - 4096 * 4 * 2


def test_training_bytes():
    t = traffic.training_bytes("add_rmsnorm", 4096, 4096, "bf16")
    m = 4096 * 4096 * 2
    assert t["forward"] == 4 * m + 4096 * 2 + 4096 * 4
    assert t["backward"] == 4 * m + 4096 * 2 + 4096 * 4 + 2 * 264 * 4096 * 4 + 4096 * 2
    assert t["total"] == t["forward"] + t["backward"]
    with pytest.raises(traffic.TrafficError, match="training step"):
        traffic.training_bytes("rmsnorm_fp8", 1, 1)
