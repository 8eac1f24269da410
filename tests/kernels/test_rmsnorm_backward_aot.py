"""Chapter 9's kernels compile for sm_90 with no GPU, and their row loads are 16-byte vectors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_kernels_compile_for_sm90_with_vector_loads():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "code"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "tests.kernels.aot_backward"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("no ptxas in this Triton install")
    assert proc.returncode == 0, proc.stderr[-2000:]
    forms = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(forms) == 3 * 9 + 2 + 4  # and a wide row of bf16 and of fp32
    for name, loads in forms.items():
        if name.startswith(("backward", "forward")):
            assert any(".v4." in f or ".v2." in f for f in loads), (name, loads)
