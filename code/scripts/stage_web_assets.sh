#!/usr/bin/env bash
# Stage the book's offline browser assets (widget embedder, require.js, MathJax 3) for Sphinx.
#
# They come from the pinned npm manifest and lock in book/_web (installed by `npm ci`, never
# committed) and land in _build/web_assets/_static/fusedrms_web/, which _config.yml lists in
# html_extra_path, so the site serves them as _static/fusedrms_web/... on every page that needs
# them. html_extra_path (not html_static_path): Jupyter Book adds every *.js of a static folder to
# every page, which loads the widget embedder twice and draws every widget twice.
set -euo pipefail
cd "$(dirname "$0")/../.."
web=book/_web
modules=$web/node_modules
dest=_build/web_assets/_static/fusedrms_web

# Install (or reinstall) when node_modules is missing or older than the lock.
if [ ! -f "$modules/.package-lock.json" ] || [ "$web/package-lock.json" -nt "$modules/.package-lock.json" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "[web] npm is missing: install Node.js 18+ and npm (Debian: apt-get install nodejs npm)," >&2
    echo "[web] then run 'make book' again. The book serves its widget and math scripts itself." >&2
    exit 1
  fi
  echo "[web] npm ci in $web (pinned widget embedder, require.js, MathJax)"
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error)
fi

need() {
  if [ ! -e "$1" ]; then
    echo "[web] missing $1: delete $modules and run 'make book' again" >&2
    exit 1
  fi
}
manager=$modules/@jupyter-widgets/html-manager
need "$manager/dist/embed-amd.js"
need "$modules/requirejs/require.js"
need "$modules/mathjax/es5/tex-chtml.js"

rm -rf "$dest"
mkdir -p "$dest/html-manager" "$dest/mathjax" "$dest/licenses"

cp "$modules/requirejs/require.js" "$dest/require.js"
cp "$web/widgets-setup.js" "$web/book.css" "$dest/"

# The embedder and the icon fonts it references by hashed name (no source maps, no non-AMD build).
# Its bundled JSON-schema validator (ajv, strict mode) warns "use allowUnionTypes" on the console
# of every widget page about the widget schema's union types; turn that option on in the copy.
union='e.opts.allowUnionTypes||'
if [ "$(grep -o "$union" "$manager/dist/embed-amd.js" | wc -l)" -lt 1 ]; then
  echo "[web] embed-amd.js no longer contains '$union': update the allowUnionTypes patch" >&2
  exit 1
fi
sed "s/e\.opts\.allowUnionTypes||/(e.opts.allowUnionTypes=!0)||/g" \
  "$manager/dist/embed-amd.js" > "$dest/html-manager/embed-amd.js"
for f in "$manager"/dist/*.{woff2,woff,ttf,eot,svg}; do cp "$f" "$dest/html-manager/"; done

# MathJax 3: the TeX->CommonHTML component plus what it loads lazily (fonts, TeX extensions, menu,
# accessibility), all found relative to tex-chtml.js.
mj=$modules/mathjax/es5
cp "$mj/tex-chtml.js" "$dest/mathjax/"
for d in input output ui a11y adaptors sre; do cp -r "$mj/$d" "$dest/mathjax/"; done

cp "$modules/mathjax/LICENSE" "$dest/licenses/mathjax-LICENSE"
cp "$manager/LICENSE" "$dest/licenses/html-manager-LICENSE" 2>/dev/null || true
cp "$manager/dist/embed.js.LICENSE.txt" "$dest/licenses/html-manager-bundled-LICENSES.txt" 2>/dev/null || true

versions=$(cd "$web" && node -e '
  const lock = require("./package-lock.json").packages;
  const v = n => lock["node_modules/" + n].version;
  console.log(`html-manager ${v("@jupyter-widgets/html-manager")}, requirejs ${v("requirejs")}, mathjax ${v("mathjax")}`);')
echo "$versions" > "$dest/VERSIONS.txt"
echo "[web] staged $versions into $dest ($(du -sh "$dest" | cut -f1))"
