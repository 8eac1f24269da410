#!/usr/bin/env bash
# budget: 330
# Named 80_ so it runs after 07_capstone has tuned the capstone: the grid times the tuned kernel.
# Chapter 6: the recorded benchmark grid, the timing rules, an Nsight Compute summary, the chart.
# Budget: 330 s in total. Each step has its own hard limit and writes its own files, so one
# failure does not hide the others. Outputs go flat into $RESULTS:
#   bench_grid.json/.csv  timing_rules.json  ncu_summary.json (+ ncu_raw.txt)  bench_plot.png/.svg
set -uo pipefail
: "${RESULTS:?set RESULTS to the output folder}"
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
step() { echo "--- 80_bench [+$(elapsed) s] $*"; }
status=0
# BENCH_STEPS picks steps (default all four); BENCH_BUDGET_S is the grid's soft budget (default 190 s).
steps=",${BENCH_STEPS:-grid,rules,ncu,plot},"
want() { [[ "$steps" == *",$1,"* ]]; }
budget=${BENCH_BUDGET_S:-190}

# 1. The grid (kernels and peers in 3 processes, torch.compile in 1 more with what is left).
#    --budget-s is the soft limit (later cases are recorded as skipped); timeout is the hard one.
if want grid; then
  step "bench plan h200 (soft budget $budget s, hard limit $(( budget + 20 )) s)"
  timeout -k 5 $(( budget + 20 )) python3 -m fusedrms.measure.harness plan h200 --budget-s "$budget" \
    --compile-share 0.3 --allow-missing-floor --out "$RESULTS/bench_grid.json" \
    || { echo "bench: exit $?"; status=1; }
fi

# 2. Each timing rule, kept and ignored (uses the grid's per-process medians when present).
if want rules; then
  step "timing rules (hard limit 40 s)"
  grid_arg=(); [ -f "$RESULTS/bench_grid.json" ] && grid_arg=(--grid "$RESULTS/bench_grid.json")
  timeout -k 5 40 python3 -m fusedrms.measure.harness rules "${grid_arg[@]}" --out "$RESULTS/timing_rules.json" \
    || { echo "rules: exit $?"; status=1; }
fi

# 3. Nsight Compute on the target kernel only, filtered by name ("unavailable" if it fails).
if want ncu; then
  step "ncu summary (hard limit 45 s)"
  timeout -k 5 45 python3 -m fusedrms.measure.harness ncu --timeout 28 --out "$RESULTS/ncu_summary.json" \
    || { echo "ncu: exit $?"; status=1; }
  if [ -f "$RESULTS/ncu_summary.json" ]; then
    python3 - "$RESULTS" <<'PY' || true
import json, sys, pathlib
doc = json.loads((pathlib.Path(sys.argv[1]) / "ncu_summary.json").read_text())
rec = doc["records"][0]
(pathlib.Path(sys.argv[1]) / "ncu_raw.txt").write_text(rec.get("raw_tail", "") + "\n")
print({k: rec.get(k) for k in ("status", "impl", "kernel", "dram_throughput_pct",
                               "sol_memory_pct", "duration_us", "reason")})
PY
  fi
fi

# 4. The chart.
if want plot && [ -f "$RESULTS/bench_grid.json" ]; then
  step "plot (hard limit 15 s)"
  timeout -k 5 15 python3 -m fusedrms.measure.plots "$RESULTS/bench_grid.json" --out "$RESULTS/bench_plot" \
    || { echo "plot: exit $?"; status=1; }
fi
step "done, exit $status"
exit $status
