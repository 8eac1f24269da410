#!/usr/bin/env bash
# Every chapter on the GPU under nbval (the same command CI runs on the CPU), then chapter 1's
# budget: 240
# printed output kept as a record.
set -uo pipefail
source code/scripts/gpu/jupyter_env.source
python3 -c "import nbval, ipykernel" 2>/dev/null || { echo "no Jupyter stack here: skipped"; exit 0; }
python3 -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env chapters 2>&1 | tail -30
rc=${PIPESTATUS[0]}
python3 - <<'PY'
import os, nbformat
from nbclient import NotebookClient
nb = nbformat.read("chapters/01_formula.ipynb", as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "chapters"}}).execute()
lines = []
for cell in nb.cells:
    for out in cell.get("outputs", []):
        text = out.get("text") or out.get("data", {}).get("text/plain", "")
        if text:
            lines.append(text.rstrip())
open(os.path.join(os.environ["RESULTS"], "ch01_gpu_output.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines[:12]))
PY
exit $rc
