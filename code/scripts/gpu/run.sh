#!/usr/bin/env bash
# A GPU machine without a package registry: install the wheels carried in .whl/, then run one of
#
#   bash code/scripts/gpu/run.sh record [ARGS]    python -m fusedrms.record ARGS --out $RESULTS,
#                                                 then $RESULTS packed into $OUT/recording.tar.gz
#   bash code/scripts/gpu/run.sh tests [PYTEST]   every gpu-marked test (junit in $OUT/logs/)
#   bash code/scripts/gpu/run.sh notebooks [NB]   chapters under nbval (default: all of them)
#   bash code/scripts/gpu/run.sh env              what runs where (python -m fusedrms.env)
#
# from the repository root. RESULTS (default: a fresh folder) is the recording's folder: pass the
# same one to add chapters to a recording (same commit only, see python -m fusedrms.record --help).
# FUSEDRMS_COMMIT names the commit where the tree has no .git (default: git, else ./.commit).
# Install the recording into the book with: bash code/scripts/install_recording.sh TARBALL
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-record}; shift || true
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FUSEDRMS_COMMIT=${FUSEDRMS_COMMIT:-$(git rev-parse HEAD 2>/dev/null || cat .commit 2>/dev/null || echo unknown)}
OUT=${OUT:-$PWD}
mkdir -p "$OUT/logs"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && echo "installed $(ls .whl/*.whl | wc -l) carried wheels"
  export PYTHONPATH="$PYTHONPATH:/tmp/site" PATH="/tmp/site/bin:$PATH"
fi
case "$what" in
  record)
    RESULTS=${RESULTS:-$(mktemp -d)}; mkdir -p "$RESULTS"
    python3 -m fusedrms.record "$@" --out "$RESULTS"
    rc=$?
    tar czf "$OUT/recording.tar.gz" -C "$RESULTS" .
    echo "packed $(du -h "$OUT/recording.tar.gz" | cut -f1) into $OUT/recording.tar.gz (from $RESULTS)"
    exit $rc ;;
  tests)
    python3 -m pytest -q -p no:cacheprovider -m "gpu and not browser" tests \
      --junitxml="$OUT/logs/gpu_tests_junit.xml" -rfE "$@" ;;
  notebooks)
    [ $# -gt 0 ] || set -- chapters
    python3 -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env "$@" ;;
  env)
    python3 -m fusedrms.env ;;
  *)
    echo "usage: bash code/scripts/gpu/run.sh record|tests|notebooks|env [ARGS]" >&2; exit 2 ;;
esac
