#!/usr/bin/env bash
# Replace the committed recording with a new one, wholesale (never file by file: a recording is
# one folder from one commit).
#   usage: bash code/scripts/install_recording.sh recording.tar.gz [more.tar.gz ...] [machine]
#                                                  [--keep ch09,...]
# Several tarballs are the parts of one recording made in several device calls at one commit
# (`record --list` prints them; chapter 7's part, recorded into chapter 6's folder, holds both): their files go into
# one folder and their manifests into one (install_recording.py merge). Tarballs of different commits, GPUs,
# drivers or versions, or two that record the same chapter, are refused and nothing changes.
# --keep carries the named chapters over from the committed recording (their files, logs and
# manifest entries, each file keeping its own provenance) where the new one did not finish them;
# the manifest then lists each kept chapter under "stale" with the reason, so its badge says so.
# Then: python -m fusedrms.tuning install code/fusedrms/data/<machine>  (only if it was tuned),
# and the staleness test (tests/test_records.py) tells whether every chapter is current.
set -euo pipefail
tarballs=(); machine=h200; keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=$2; shift 2 ;;
    *) # the first name is a tarball, as are the later ones that are files; else the machine
      if [ ${#tarballs[@]} -eq 0 ] || [ -f "$1" ]; then tarballs+=("$(realpath "$1")")
      else machine=$1; fi
      shift ;;
  esac
done
usage="usage: $0 recording.tar.gz [more.tar.gz ...] [machine] [--keep ch09,...]"
[ ${#tarballs[@]} -gt 0 ] || { echo "$usage" >&2; exit 2; }
cd "$(dirname "$0")/../.."
staged=$(mktemp -d)
trap 'rm -rf "$staged"' EXIT
python3 code/scripts/install_recording.py merge "$staged" "${tarballs[@]}"
dest=code/fusedrms/data/$machine
# the kept chapters join the staged recording first: a refusal leaves the committed one as it was
[ -z "$keep" ] || python3 code/scripts/install_recording.py keep "$dest" "$staged" "$keep"
rm -rf "$dest"
mkdir -p "$dest"
cp -a "$staged/." "$dest/"
echo "installed $(find "$dest" -type f | wc -l) files into $dest"
