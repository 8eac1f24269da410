#!/usr/bin/env bash
# budget: 40
# Chapter 2 (traffic model) on the GPU, budget about 20 s. Writes into $RESULTS:
#   traffic_bandwidth.json      the measured copy bandwidth next to the published table, and the
#                               model's ideal times for the chapter's shapes at both
#   traffic_row_registers.json  registers and spills of chapter 4's row kernel by width (fp32):
#                               where "the row stays in registers" stops being true
# Each step is its own python process with its own timeout, so one failure hides nothing else.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
RESULTS=${RESULTS:?set RESULTS to the folder that collects the results}
status=0
step() {  # step NAME SECONDS -- python source on stdin
  local name=$1 limit=$2 t0=$(date +%s)
  echo "--- 02_traffic: $name"
  if timeout "$limit" python3 - ; then
    echo "--- 02_traffic: $name ok ($(( $(date +%s) - t0 )) s)"
  else
    echo "--- 02_traffic: $name FAILED ($(( $(date +%s) - t0 )) s)"; status=1
  fi
}

step "copy bandwidth vs published figures" 10 <<'EOF'
import os
from fusedrms import env, records, traffic
e = env.current()
bw, source = traffic.reader_bandwidth_GBps()
print(f"copy bandwidth: {bw:.0f} GB/s ({source}) on {e.gpu_name}")
key = traffic.published_for(e.gpu_name)
published = traffic.PUBLISHED[key][0] if key else None
if published:
    print(f"published {key}: {published:g} GB/s -> copy reaches {100 * bw / published:.1f}%")
shapes = [("eager_add_rmsnorm", 4096, 4096), ("fused_add_rmsnorm", 4096, 4096),
          ("fused_add_rmsnorm_residual", 4096, 4096), ("rmsnorm", 4096, 4096),
          ("rmsnorm_fp8_naive", 2, 7168), ("rmsnorm_fp8_fused", 2, 7168)]
recs = [{"kind": "bandwidth", "gpu": e.gpu_name, "measured_GBps": bw, "source": source,
         "published_key": key, "published_GBps": published,
         "fraction_of_published": bw / published if published else None}]
for step, rows, cols in shapes:
    at_measured = traffic.price(step, rows, cols, "bf16", bw)
    at_published = traffic.price(step, rows, cols, "bf16", published) if published else None
    recs.append({"kind": "ideal", "step": step, "rows": rows, "cols": cols, "dtype": "bf16",
                 "bytes_total": at_measured.bytes_total,
                 "ideal_us_measured_bw": at_measured.ideal_us,
                 "ideal_us_published_bw": at_published.ideal_us if at_published else None})
    print(f"  {step:28s} {rows}x{cols}: {at_measured.ideal_us:9.3f} us at the measured bandwidth")
records.write(os.path.join(os.environ["RESULTS"], "traffic_bandwidth.json"), recs,
              extra={"published_table": {k: list(v) for k, v in traffic.PUBLISHED.items()}})
assert source == "measured", "the copy bandwidth was not measured (see the message above)"
EOF

step "row kernel registers and spills by width" 14 <<'EOF'
import os, time
import torch
from fusedrms import records
from fusedrms.kernels import rmsnorm as T
t0 = time.time()
recs = []
for cols in (4096, 8192, 16384, 32768, 65536):
    if time.time() - t0 > 9:
        print(f"stopping before {cols}: out of the time budget"); break
    try:
        block = 1 << (cols - 1).bit_length()
        warps = T.num_warps_for(block)
        k = T.row_kernel_compiled(cols=cols, dtype=torch.float32, rows=2)
        r = {"cols": cols, "dtype": "float32", "block_size": block, "num_warps": warps,
             "values_per_thread": block // (32 * warps),
             "registers_per_thread": getattr(k, "n_regs", None),
             "spills": getattr(k, "n_spills", None)}
    except Exception as e:  # record the failure, keep the other widths
        r = {"cols": cols, "dtype": "float32", "error": f"{type(e).__name__}: {e}"[:300]}
    recs.append(r)
    print(r, f"({time.time() - t0:.1f} s)")
records.write(os.path.join(os.environ["RESULTS"], "traffic_row_registers.json"), recs)
EOF

exit $status
