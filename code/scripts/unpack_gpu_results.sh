#!/usr/bin/env bash
# File a GPU session's results: JSON/CSV/PNG/SVG/TXT records go to code/fusedrms/data/<machine>/,
# logs to code/fusedrms/data/<machine>/logs/.   usage: unpack_gpu_results.sh results.tar.gz [machine]
set -euo pipefail
tarball=$1; machine=${2:-h200}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); tar xzf "$tarball" -C "$tmp"
dest=code/fusedrms/data/$machine
mkdir -p "$dest/logs"
find "$tmp" -maxdepth 1 -type f -exec cp {} "$dest/" \;
[ -d "$tmp/logs" ] && cp "$tmp"/logs/* "$dest/logs/"
ls -la "$dest"
