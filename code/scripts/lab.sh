#!/usr/bin/env bash
# `make lab`: JupyterLab on the chapters, in the book's .venv (bootstrap_lab.sh installs it first).
# Extra arguments go to `jupyter lab` (e.g. --port 9000, --no-browser).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
python -m fusedrms.env  # the line every chapter's first cell prints: what runs where
echo "[lab] opening JupyterLab on chapters/ (Ctrl+C here stops it)"
exec jupyter lab --ServerApp.root_dir="$PWD" --LabApp.default_url=/lab/tree/chapters "$@"
