#!/usr/bin/env bash
# Install the carried Jupyter wheels (the GPU image has no Jupyter stack and no registry).
# budget: 60
# They land in /tmp/site, which later pieces put on PYTHONPATH through code/scripts/gpu/jupyter_env.source.
set -uo pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && echo "installed $(ls .whl/*.whl | wc -l) carried wheels into /tmp/site"
else
  echo "no carried wheels (.whl/): notebook pieces will be skipped"
fi
python3 - <<'PY'
import torch, triton, shutil
print("torch", torch.__version__, "cuda", torch.version.cuda, "hip", torch.version.hip)
print("triton", triton.__version__, "| gpu:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
print("nvcc:", shutil.which("nvcc"), "| ncu:", shutil.which("ncu"), "| g++:", shutil.which("g++"))
PY
