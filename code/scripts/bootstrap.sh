#!/usr/bin/env bash
# Create .venv (if missing) and install everything the book needs, once.
# A machine with no GPU gets the CPU build of torch (a few hundred MB instead of several GB).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
TORCH_CPU_VERSION=${TORCH_CPU_VERSION:-2.13.0}
stamp="$VENV/.fusedrms-installed"
want="$( { cat requirements.txt pyproject.toml; cat book/_web/package-lock.json 2>/dev/null || true; } \
        | sha256sum | cut -c1-16)"

has_gpu() {
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then return 0; fi
  if [ -e /dev/kfd ] && command -v rocminfo >/dev/null 2>&1; then return 0; fi
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    if has_gpu; then
      echo "[bootstrap] GPU found: installing torch from PyPI (the CUDA build; on ROCm install torch first, see book/setup)"
      "$VENV/bin/python" -m pip install -q torch
    else
      echo "[bootstrap] no GPU: installing the CPU build of torch $TORCH_CPU_VERSION"
      if "$VENV/bin/python" -c "import socket; socket.setdefaulttimeout(5); \
           socket.getaddrinfo('download.pytorch.org', 443)" 2>/dev/null; then
        "$VENV/bin/python" -m pip install -q --retries 1 "torch==$TORCH_CPU_VERSION" \
          --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple
      else  # a mirror or local wheel house serves the CPU build under its plain name
        "$VENV/bin/python" -m pip install -q "torch==$TORCH_CPU_VERSION"
      fi
    fi
  fi
  echo "[bootstrap] installing requirements.txt and the fusedrms package (editable)"
  "$VENV/bin/python" -m pip install -q -r requirements.txt
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
  # The web assets are for the built book only (build_book.sh installs them too if missing):
  # `make lab` skips them, so a reader without npm can still run the notebooks.
  if [ -f book/_web/package.json ] && [ "${FUSEDRMS_SKIP_WEB:-0}" != 1 ]; then
    echo "[bootstrap] installing the book's offline web assets (npm ci)"
    (cd book/_web && npm ci --no-audit --no-fund --loglevel=error)
  fi
  echo "$want" > "$stamp"
fi
