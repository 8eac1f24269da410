"""The ladder's reading side: table and verdict from a recorded file (written here, not measured)."""
import json

import pytest

from fusedrms import records
from fusedrms.book import ch03


def _rec(name, rows, cols, dtype, us, floor_us, correct=True):
    return {"kind": "ladder", "name": name, "rows": rows, "cols": cols, "dtype": dtype,
            "median_us": us, "floor_us": floor_us, "fraction_of_floor": floor_us / us,
            "GBps": 1000.0, "correct": correct}


def _doc(tmp_path, recs):
    path = records.write(tmp_path / "hip_ladder.json", recs, {"copy_GBps": 4200.0})
    return json.loads(path.read_text())


def test_verdict_met_and_not_met(tmp_path):
    doc = _doc(tmp_path, [
        _rec("hip.block", 1024, 4096, "float32", 20.0, 8.0),
        _rec("hip.block", 16384, 8192, "float32", 300.0, 250.0),
        _rec("hip.vectorized", 16384, 8192, "float32", 280.0, 250.0),
        _rec("triton.row", 16384, 8192, "float32", 260.0, 250.0),
        _rec("hip.vectorized", 16384, 8192, "bfloat16", 200.0, 125.0),
        _rec("hip.serial", 16384, 8192, "bfloat16", 100.0, 125.0, correct=False),  # never counts
        _rec("triton.row", 16384, 8192, "bfloat16", 130.0, 125.0),
    ])
    lines = ch03.verdict(doc)
    assert len(lines) == 2, lines  # the seed shape is not a "large" shape
    fp32 = next(line for line in lines if "float32" in line)
    bf16 = next(line for line in lines if "bfloat16" in line)
    assert "hip.vectorized" in fp32 and "89.3%" in fp32 and fp32.count(": met") == 2
    assert "62.5%" in bf16 and "not met, gap 22.5 points" in bf16 and "1.54x" in bf16
    assert "Recorded on" in records.describe(doc)
    table = ch03.table(doc)
    assert "1024x4096 float32" in table and "hip.serial" in table


def test_missing_triton_and_errors_are_reported_not_raised(tmp_path):
    doc = _doc(tmp_path, [
        _rec("hip.block", 16384, 8192, "float32", 300.0, 250.0),
        {"kind": "ladder", "name": "hip.shuffle", "rows": 16384, "cols": 8192, "dtype": "float32",
         "error": "KernelError: boom"},
    ])
    line = ch03.verdict(doc)[0]
    assert "not available" in line
    assert "boom" in ch03.table(doc)


def test_bytes_counted():
    assert ch03.rmsnorm_bytes(1024, 4096, __import__("torch").float32) == (2 * 1024 * 4096 + 4096) * 4


def _full_doc_records():
    recs = []
    for rows, cols, dtype, floor in [(1024, 4096, "float32", 8.0), (16384, 8192, "float32", 250.0),
                                     (16384, 8192, "bfloat16", 125.0)]:
        for name, factor in [("hip.serial", 40.0), ("hip.block", 1.4), ("hip.shuffle", 1.3),
                             ("hip.registers", 1.2), ("hip.vectorized", 1.1), ("hip.unfused", 3.0),
                             ("hip.vectorized_unfused", 2.2), ("triton.row", 1.05)]:
            recs.append(_rec(name, rows, cols, dtype, floor * factor, floor))
    for block in ch03.BLOCK_SIZES:
        recs.append({**_rec("hip.block", 1024, 4096, "float32", 20.0 + block / 100, 8.0),
                     "kind": "block_size", "block_size": block})
    for block in ch03.SERIAL_BLOCK_SIZES:
        recs.append({**_rec("hip.serial", 1024, 4096, "float32", 100.0 + block, 8.0),
                     "kind": "serial_block_size", "block_size": block, "grid_blocks": -(-1024 // block)})
    return recs


def test_reading_helpers_on_a_full_file(tmp_path):
    doc = _doc(tmp_path, _full_doc_records())
    fusion = ch03.fusion(doc)
    assert len(fusion) == 6, fusion  # two fair pairs at each of the three shapes
    pairs = {(f["unfused"], f["fused"]) for f in fusion}
    assert pairs == {("hip.unfused", "hip.shuffle"), ("hip.vectorized_unfused", "hip.vectorized")}
    vec = next(f for f in fusion if f["fused"] == "hip.vectorized" and f["dtype"] == "bfloat16")
    assert abs(vec["speedup"] - 2.2 / 1.1) < 1e-9 and abs(vec["bytes_ratio"] - 3.5) < 0.01
    # hip.shuffle reads x twice: its pipeline moves 7/3 of its bytes in bf16, 5/3 in fp32
    two_pass = {f["dtype"]: f["bytes_ratio"] for f in fusion if f["fused"] == "hip.shuffle"}
    assert two_pass == pytest.approx({"float32": 5 / 3, "bfloat16": 7 / 3}, rel=1e-3)
    lines = ch03.fusion_lines(doc)
    assert any("16-byte loads: hip.vectorized_unfused" in line and "fusion saves 2.00x" in line
               and "bytes alone predict 3.50x" in line for line in lines), lines
    assert len(ch03.block_size_lines(doc)) == len(ch03.BLOCK_SIZES)
    serial = ch03.block_size_lines(doc, "serial_block_size")
    assert len(serial) == len(ch03.SERIAL_BLOCK_SIZES)
    assert any(line.startswith("block   128 on    8 blocks") for line in serial), serial
    seed = ch03.seed_comparison_lines(doc)
    assert "RX 9070 XT" in seed[0] and any("25.8x" in s for s in seed) and "28.6x" in seed[-1]
    assert all(": met" in line and "not met" not in line for line in ch03.verdict(doc))


def test_measure_one_builds_a_complete_record_on_the_cpu_runtime():
    calls = []

    def fake_timer(fn, warmup, reps):  # runs the kernel, returns made-up microseconds
        fn()
        calls.append((warmup, reps))
        return [10.0] * reps

    rec = ch03.measure_one("hip.shuffle", 3, 13, "float32", 4000.0, device="cpu", timer=fake_timer)
    assert rec["correct"] and rec["median_us"] == 10.0 and "error" not in rec, rec
    assert rec["min_us"] <= rec["p25_us"] <= rec["median_us"] <= rec["p75_us"] <= rec["max_us"]
    assert abs(rec["fraction_of_floor"] - rec["floor_us"] / 10.0) < 1e-12
    assert rec["bytes"] == ch03.rmsnorm_bytes(3, 13, __import__("torch").float32)
    assert calls[0] == (1, 3) and calls[1][1] >= 5
    bad = ch03.measure_one("hip.block", 3, 13, "float32", 4000.0, device="cpu", timer=fake_timer,
                             fn=lambda x, w, eps: 1 / 0)
    assert bad["error"].startswith("ZeroDivisionError")


def test_the_plan_measures_every_rung_and_both_sweeps():
    steps = ch03.plan()
    shapes = [ch03.SEED_SHAPE, *ch03.LARGE_SHAPES]
    for rows, cols, dtype in shapes:
        names = [s["name"] for s in steps if s["kind"] == "ladder" and (s["rows"], s["cols"], s["dtype"]) ==
                 (rows, cols, dtype)]
        assert set(names) == set(ch03.LADDER) and names[-1] == "hip.serial"
        assert "hip.vectorized_unfused" in names  # fusion's fair baseline at every shape
    for kind, name, sizes in [("block_size", "hip.block", ch03.BLOCK_SIZES),
                              ("serial_block_size", "hip.serial", ch03.SERIAL_BLOCK_SIZES)]:
        sweep = [s for s in steps if s["kind"] == kind]
        assert [s["block_size"] for s in sweep] == list(sizes)
        assert all(s["name"] == name and (s["rows"], s["cols"], s["dtype"]) == ch03.SEED_SHAPE
                   for s in sweep)
    assert 128 in ch03.SERIAL_BLOCK_SIZES and len(ch03.SERIAL_BLOCK_SIZES) > 1  # the default, and others


def test_rung_gains_sweeps_and_host_results(tmp_path):
    doc = _doc(tmp_path, [
        _rec("hip.serial", 1024, 4096, "float32", 1000.0, 8.0),
        _rec("hip.block", 1024, 4096, "float32", 20.0, 8.0),
        _rec("hip.shuffle", 1024, 4096, "float32", 20.0, 8.0),
        _rec("hip.registers", 1024, 4096, "float32", 16.0, 8.0),
        _rec("hip.vectorized", 1024, 4096, "float32", 10.0, 8.0, correct=False),  # never counts
        {**_rec("hip.serial", 1024, 4096, "float32", 2000.0, 8.0), "kind": "serial_block_size",
         "block_size": 256, "grid_blocks": 4, "min_us": 1990.0, "max_us": 2010.0},
        {**_rec("hip.serial", 1024, 4096, "float32", 1000.0, 8.0), "kind": "serial_block_size",
         "block_size": 128, "grid_blocks": 8},
    ])
    gains = ch03.rung_gains(doc)
    assert [(g["from"], g["to"], g["gain"]) for g in gains] == [
        ("hip.serial", "hip.block", 50.0), ("hip.block", "hip.shuffle", 1.0),
        ("hip.shuffle", "hip.registers", 1.25)]
    serial = ch03.sweep(doc, "serial_block_size")
    assert [(p["block_size"], p["grid_blocks"]) for p in serial] == [(128, 8), (256, 4)]
    assert serial[1]["min_us"] == 1990.0 and ch03.sweep(doc) == []
    assert [p["name"] for p in ch03.ladder_points(doc)] == [
        "hip.serial", "hip.block", "hip.shuffle", "hip.registers", "hip.vectorized"]
    text = ("built with nvcc\nRESULT variant=serial rows=1024 cols=4096 block=256 median_ms=2.0 "
            "min_ms=1.9 max_ms=2.1 max_abs_err=1e-6 max_rel_err=2e-6 ok=1\n"
            "RESULT variant=block rows=1024 cols=4096 block=256 median_ms=0.02 max_rel_err=2e-7 ok=0\n"
            "RESULT broken line\n")
    host = ch03.host_results(text)
    assert [(h["variant"], h["grid_blocks"], h["ok"]) for h in host] == [
        ("serial", 4, True), ("block", 1024, False)]
    assert host[0]["median_us"] == 2000.0


# ---- the page's sentences in every state of the recording

def _point(name, us, shape="1024x4096 float32", p25=None, p75=None, correct=True, rows=1024):
    return {"name": name, "shape": shape, "rows": rows, "median_us": us, "min_us": us,
            "max_us": us, "p25_us": p25, "p75_us": p75, "fraction_of_floor": 8.0 / us,
            "correct": correct}


def _grid_rec(impl, medians, mode="cold", rows=1024, cols=4096, dtype="fp32"):
    return {"impl": impl, "status": "ok", "mode": mode, "rows": rows, "cols": cols,
            "dtype": dtype, "median_us": sorted(medians)[len(medians) // 2],
            "process_medians_us": medians}


def test_the_tie_band_is_the_hip_kernels_spread_with_the_l2_flushed():
    grid = {"records": [_grid_rec("hip.block", [10.0, 10.2, 10.4]),
                        _grid_rec("hip.shuffle", [10.0, 10.1, 10.2]),
                        _grid_rec("triton.row", [10.0, 20.0]),  # another kernel family
                        _grid_rec("hip.block", [10.0, 30.0], mode="warm")]}  # another timer
    from fusedrms.measure import compare

    assert ch03.tie_band(grid) == pytest.approx(compare.tie_band(grid["records"][:2]))
    assert ch03.tie_band(None) is None and ch03.tie_band({"records": []}) is None
    one_row = _grid_rec("hip.serial", [320.0, 326.0, 330.0], rows=1)
    assert ch03.one_row_us({"records": [one_row]}) == 326.0
    assert ch03.one_row_us({"records": [{**one_row, "mode": "graph"}]}) is None


def test_the_story_reads_a_full_recording(tmp_path):
    from fusedrms.book import ch03_story

    doc = _doc(tmp_path, _full_doc_records())
    f = ch03_story.story_facts({"ladder": doc, "grid": None})
    assert f["registers_gains"] == [pytest.approx(1.3 / 1.2)] * 3  # one per shape
    assert f["vector_gains"] == [pytest.approx(1.2 / 1.1)] * 3
    assert f["hip_vs_triton"] == [pytest.approx(1.05, abs=0.005)] * 3
    assert (f["floor"]["correct"], f["floor"]["over"]) == (24, 0)
    assert f["serial_gains"] == {1024: pytest.approx(28.57, abs=0.01),
                                 16384: pytest.approx(28.57, abs=0.01)}
    assert f["blocks"]["best"] == 32 and f["blocks"]["largest_x"] == pytest.approx(1.5, abs=0.05)
    assert f["serial"]["quick_blocks"] == 1024
    values = ch03_story.story_values({"ladder": doc, "grid": None})
    assert (values["registers_gain"], values["vector_gain"]) == ("1.08×", "1.09×")

def _sweep(kind_sizes):
    return [{"block_size": b, "grid_blocks": -(-1024 // b), "median_us": us} for b, us in kind_sizes]


def test_the_page_reads_the_ladder_at_the_books_copy_floor():
    doc, floor = ch03.load(), records.copy_floor()
    measured = [r for r in doc["records"] if "median_us" in r]
    assert measured
    for r in measured:
        assert 100 * r["fraction_of_floor"] == pytest.approx(floor.pct(r["bytes"], r["median_us"]))
        assert r["floor_us"] == pytest.approx(floor.us(r["bytes"])) and r["copy_GBps"] == floor.GBps


def _section(name):
    from fusedrms.kernels.hip import build

    text = build.source_text()
    start = text.index(f"// [book:{name}]")
    return text[start:text.index(f"// [/book:{name}]", start)]


def test_each_fused_twin_is_priced_by_how_often_it_reads_x():
    """hip.shuffle reads the row in two loops, hip.vectorized once (into registers): the byte
    ratio of each fusion pair uses the traffic step that reads x as often as the kernel does."""
    steps = {fused: step for _, fused, _, step in ch03.FUSION_PAIRS}
    assert _section("shuffle").count("to_float(x_row[col])") == 2
    assert steps["hip.shuffle"] == "rmsnorm_two_pass"
    assert steps["hip.vectorized"] == "rmsnorm"


def _chapter_cells():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "chapters" / "03_hip.ipynb"
    return json.loads(path.read_text())["cells"]


def test_the_chapter_judges_differences_with_the_derived_tie_band():
    code = "\n".join("".join(c["source"]) for c in _chapter_cells() if c["cell_type"] == "code")
    assert "BAND = ladder.tie_band(grid)" in code
    assert "compare.verdict(" in code  # the experiment record's "a tie"
    assert not hasattr(ch03, "FUSION_MATCH")  # no asserted 5%


def test_the_early_return_example_names_its_unwritten_columns():
    prose = " ".join(" ".join("".join(c["source"]).split()) for c in _chapter_cells()
                     if c["cell_type"] == "markdown")
    assert "if (tid >= stride) return;" in prose
    assert "columns of `y` are never written" in prose


def test_the_registers_rung_is_the_vectorized_kernel_with_one_value_per_load():
    """hip.registers changes one thing from hip.shuffle (the row held in registers, x read once)
    and hip.vectorized one thing from it (16-byte loads): the same kernel, built with
    FUSEDRMS_SCALAR_LOADS, on the CPU runtime as on a GPU."""
    import torch

    from fusedrms import checks, reference
    from fusedrms.kernels.hip import kernels

    i = ch03.LADDER.index("hip.registers")
    assert ch03.LADDER[i - 1:i + 2] == ("hip.shuffle", "hip.registers", "hip.vectorized")
    x, w = torch.randn(5, 256), torch.randn(256)
    assert kernels.vector_width(x, w) == 4  # aligned fp32, 256 columns: 16-byte packs
    lib = kernels.library("cpu", defines=ch03.SCALAR_LOADS)
    assert lib.fusedrms_vector_width(0, x.data_ptr(), w.data_ptr(), x.data_ptr(), 256, 256) == 1
    for dtype in (torch.float32, torch.bfloat16):
        xd, wd = x.to(dtype), w.to(dtype)
        y = ch03.rmsnorm_registers(xd, wd, 1e-5)
        assert checks.allclose(y, reference.rmsnorm(xd, wd, 1e-5, accum=torch.float64)).ok
    rec = ch03.measure_one("hip.registers", 3, 64, "float32", 4000.0, device="cpu",
                           timer=lambda fn, warmup, reps: [fn(), [10.0] * reps][1])
    assert rec["correct"] and "error" not in rec, rec
