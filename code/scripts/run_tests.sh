#!/usr/bin/env bash
# Every test: build the book strictly, then unit tests, notebooks (nbval) and the browser test in
# one pytest run. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
JOBS=${JOBS:-2}
bash code/scripts/build_book.sh --strict
python -m pytest -n "$JOBS" --dist loadscope -p no:cacheprovider \
  --nbval-lax --nbval-current-env tests chapters "$@"
