#!/usr/bin/env bash
# Replace the committed recording with a new one, wholesale (never file by file: a recording is
# one folder from one commit).
#   usage: bash code/scripts/install_recording.sh recording.tar.gz [machine] [--keep ch09,...]
# --keep carries the named chapters over from the committed recording (their files, logs and
# manifest entries, each file keeping its own provenance) where the new one did not finish them;
# the manifest then lists each kept chapter under "stale" with the reason, so its badge says so.
# Then: python -m fusedrms.tuning install code/fusedrms/data/<machine>  (only if it was tuned),
# and the staleness test (tests/test_records.py) tells whether every chapter is current.
set -euo pipefail
tarball=$(realpath "$1"); shift
machine=h200; keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=$2; shift 2 ;;
    *) machine=$1; shift ;;
  esac
done
cd "$(dirname "$0")/../.."
# (listing first: grep -q stopping early would make tar fail under pipefail)
listing=$(tar tzf "$tarball")
grep -qx './MANIFEST.json' <<<"$listing" || { echo "$tarball has no MANIFEST.json: not a recording" >&2; exit 2; }
dest=code/fusedrms/data/$machine
old=$(mktemp -d)
[ -z "$keep" ] || cp -a "$dest/." "$old/"
rm -rf "$dest"
mkdir -p "$dest"
tar xzf "$tarball" -C "$dest"
if [ -n "$keep" ]; then
  python3 - "$old" "$dest" "$keep" <<'PY'
import json, shutil, sys
from pathlib import Path
old, new, keep = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
mo, mn = (json.loads((d / "MANIFEST.json").read_text()) for d in (old, new))
for ch in keep:
    entry = mo["chapters"].get(ch)
    if not entry or entry.get("status") != "ok":
        sys.exit(f"--keep {ch}: the committed recording has no finished {ch}")
    files = {f: e for f, e in mo["files"].items() if e.get("chapter") == ch}
    for f in files:
        (new / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(old / f, new / f)
    mn["files"] = {f: e for f, e in mn["files"].items() if e.get("chapter") != ch} | files
    mn["chapters"][ch] = entry
    print(f"kept {ch} ({len(files)} files) from commit {str(entry.get('commit'))[:10]}")
(new / "MANIFEST.json").write_text(json.dumps(mn, indent=1) + "\n")
# a kept chapter whose sources changed since it was measured is acknowledged, with the reason;
# one whose sources did not change stays current (no note that would hide a later change)
sys.path.insert(0, "code")
from fusedrms import records  # noqa: E402
for ch in keep:
    state = records.staleness(ch, new)
    if state.state != "current":
        mn["stale"] = {**mn.get("stale", {}), ch: (
            f"kept from the recording of commit {str(mn['chapters'][ch].get('commit'))[:10]}: "
            "its sources changed since, and the new recording did not include it; re-recorded "
            "in the next GPU run")}
    else:
        mn.get("stale", {}).pop(ch, None)
    print(f"{ch}: {state.state}")
(new / "MANIFEST.json").write_text(json.dumps(mn, indent=1) + "\n")
PY
fi
rm -rf "$old"
echo "installed $(find "$dest" -type f | wc -l) files into $dest"
