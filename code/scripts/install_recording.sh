#!/usr/bin/env bash
# Replace the committed recording with a new one, wholesale (never file by file: a recording is
# one folder from one commit).   usage: bash code/scripts/install_recording.sh recording.tar.gz [machine]
# Then: python -m fusedrms.tuning install code/fusedrms/data/<machine>  (only if it was tuned),
# and the staleness test (tests/test_records.py) tells whether every chapter is current.
set -euo pipefail
tarball=$(realpath "$1"); machine=${2:-h200}
cd "$(dirname "$0")/../.."
# (listing first: grep -q stopping early would make tar fail under pipefail)
listing=$(tar tzf "$tarball")
grep -qx './MANIFEST.json' <<<"$listing" || { echo "$tarball has no MANIFEST.json: not a recording" >&2; exit 2; }
dest=code/fusedrms/data/$machine
rm -rf "$dest"
mkdir -p "$dest"
tar xzf "$tarball" -C "$dest"
echo "installed $(find "$dest" -type f | wc -l) files into $dest"
