"""The ladder's reading side: table and verdict from a recorded file (written here, not measured)."""
import json

from fusedrms import records
from fusedrms.hip import ladder


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
    lines = ladder.verdict(doc)
    assert len(lines) == 2, lines  # the seed shape is not a "large" shape
    fp32 = next(line for line in lines if "float32" in line)
    bf16 = next(line for line in lines if "bfloat16" in line)
    assert "hip.vectorized" in fp32 and "89.3%" in fp32 and fp32.count(": met") == 2
    assert "62.5%" in bf16 and "not met, gap 22.5 points" in bf16 and "1.54x" in bf16
    assert "Recorded on" in records.describe(doc)
    table = ladder.table(doc)
    assert "1024x4096 float32" in table and "hip.serial" in table


def test_missing_triton_and_errors_are_reported_not_raised(tmp_path):
    doc = _doc(tmp_path, [
        _rec("hip.block", 16384, 8192, "float32", 300.0, 250.0),
        {"kind": "ladder", "name": "hip.shuffle", "rows": 16384, "cols": 8192, "dtype": "float32",
         "error": "KernelError: boom"},
    ])
    line = ladder.verdict(doc)[0]
    assert "not available" in line
    assert "boom" in ladder.table(doc)


def test_bytes_counted():
    assert ladder.rmsnorm_bytes(1024, 4096, __import__("torch").float32) == (2 * 1024 * 4096 + 4096) * 4
