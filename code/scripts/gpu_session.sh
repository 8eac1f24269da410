#!/usr/bin/env bash
# One GPU session: runs every piece under code/scripts/gpu/ in order and packs what they wrote.
#
#   bash code/scripts/gpu_session.sh [REGEX]   (on the GPU machine, from the repo root; REGEX picks
#                                              pieces by name, e.g. "^0[0-4]")
#
# Each piece is a bash script that reads $RESULTS (a folder to write JSON/CSV/PNG/text into) and
# must finish inside its budget, a line "# budget: SECONDS" in the piece (default 120); past it the
# piece is stopped. A failing piece is logged and the next one still runs. The results are packed
# again after every piece, so a session cut short still returns what was done.
# Everything ends up in $OUT/results.tar.gz (or ./gpu_results.tar.gz without $OUT); unpack it with
# code/scripts/unpack_gpu_results.sh, which files the records under code/fusedrms/data/<machine>/.
set -uo pipefail
cd "$(dirname "$0")/../.."
pattern=${1:-}
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FUSEDRMS_COMMIT=${FUSEDRMS_COMMIT:-$(git rev-parse HEAD 2>/dev/null || cat .commit 2>/dev/null || echo unknown)}
export RESULTS=${RESULTS:-$(mktemp -d)}
mkdir -p "$RESULTS/logs"
python3 -m fusedrms.env | tee "$RESULTS/logs/env.txt"
nvidia-smi > "$RESULTS/logs/nvidia-smi.txt" 2>&1 || true
status=0
dest=${OUT:-.}/results.tar.gz
[ -n "${OUT:-}" ] || dest=./gpu_results.tar.gz
for piece in code/scripts/gpu/*.sh; do
  name=$(basename "$piece" .sh)
  [ -n "$pattern" ] && ! [[ "$name" =~ $pattern ]] && continue
  echo "=== $name ($(date -u +%T))"
  start=$(date +%s)
  budget=$(sed -n 's/^# budget: *\([0-9][0-9]*\).*/\1/p' "$piece" | head -1)
  timeout -k 10 "${budget:-120}" bash "$piece" > >(tee "$RESULTS/logs/$name.log") 2>&1
  rc=$?
  [ $rc -eq 124 ] && echo "=== $name: stopped at its budget of ${budget:-120} s"
  echo "=== $name: exit $rc after $(( $(date +%s) - start )) s"
  [ $rc -ne 0 ] && status=1
  tar czf "$dest" -C "$RESULTS" .
done
tar czf "$dest" -C "$RESULTS" .
echo "packed $(du -h "$dest" | cut -f1) into $dest"
exit $status
