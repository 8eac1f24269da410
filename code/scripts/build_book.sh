#!/usr/bin/env bash
# Build the HTML book into _build/html, executing every notebook on whatever device is present.
# --strict: Sphinx warnings become errors (the test command uses it).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
strict=()
[ "${1:-}" = "--strict" ] && strict=(-W -n --keep-going)
python -m fusedrms.env
rm -rf _build/html _build/.doctrees _build/jupyter_execute
if [ -f code/scripts/stage_web_assets.sh ]; then bash code/scripts/stage_web_assets.sh; fi
jupyter-book build . --all "${strict[@]}"
echo
echo "The book is built. Open: file://$PWD/_build/html/index.html"
echo "(or serve it: python -m http.server -d _build/html 8000, then http://localhost:8000)"
