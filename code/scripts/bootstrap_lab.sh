#!/usr/bin/env bash
# `make lab`'s install step: what a live notebook needs on top of bootstrap.sh's environment.
#   - requirements-lab.txt: JupyterLab, Notebook 7 and jupyterlab_widgets (the widget front end of
#     the kernel-side ipywidgets 8.x), into the same .venv;
#   - the kernel, registered inside .venv (--sys-prefix: nothing outside .venv changes) as
#     "python3", the name every chapter asks for, displayed as "Python 3 (fusedrms book)". One
#     kernel to pick in JupyterLab, Notebook 7 and VS Code alike (a second kernel spec makes
#     JupyterLab ask which one to start). Its command stays "python", which Jupyter runs as the
#     server's own interpreter, so the spec still works after the clone is moved.
# All or nothing: if any step fails (or is interrupted), the packages it added are uninstalled, the
# ones it changed are put back and the kernel registration is removed, so a rerun starts clean.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
KERNEL=python3
KERNEL_LABEL="Python 3 (fusedrms book)"
FUSEDRMS_SKIP_WEB=1 bash code/scripts/bootstrap.sh  # no npm needed to run notebooks
py="$VENV/bin/python"
stamp="$VENV/.fusedrms-lab-installed"
want="$(cat requirements.txt requirements-lab.txt | sha256sum | cut -c1-16)"
kernel_dir="$VENV/share/jupyter/kernels/$KERNEL"

widgets_front_end_ok() {  # the JupyterLab half of ipywidgets is installed and enabled
  "$VENV/bin/jupyter" labextension list 2>&1 \
    | grep -Eq '@jupyter-widgets/jupyterlab-manager .*enabled.*OK'
}

kernel_registered() {
  grep -qF "\"$KERNEL_LABEL\"" "$kernel_dir/kernel.json" 2>/dev/null
}

if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$VENV/bin/jupyter-lab" ] && kernel_registered; then
  exit 0
fi

before=$(mktemp)
kernel_backup=$(mktemp -d)
[ -d "$kernel_dir" ] && cp -r "$kernel_dir" "$kernel_backup/"
"$py" -m pip list --format=freeze --disable-pip-version-check > "$before"
undo() {
  local rc=$?
  trap - ERR INT TERM
  echo "[lab] the install failed (exit $rc): undoing it so that .venv is as it was" >&2
  rm -f "$stamp"
  rm -rf "$kernel_dir"
  [ -d "$kernel_backup/$KERNEL" ] && cp -r "$kernel_backup/$KERNEL" "$kernel_dir"
  "$py" code/scripts/lab_env.py undo "$before" || true
  rm -rf "$before" "$kernel_backup"
  echo "[lab] fix what the message above says (network, disk space) and run 'make lab' again" >&2
  exit "$rc"
}
trap undo ERR INT TERM

echo "[lab] installing requirements-lab.txt (JupyterLab, Notebook 7, the ipywidgets front end, MyST)"
"$py" -m pip install -q --disable-pip-version-check -r requirements-lab.txt
if ! widgets_front_end_ok; then
  echo "[lab] the widget front end (@jupyter-widgets/jupyterlab-manager) is not enabled in JupyterLab:" >&2
  "$VENV/bin/jupyter" labextension list >&2 || true
  false
fi
echo "[lab] registering the kernel '$KERNEL' ($KERNEL_LABEL) inside $VENV"
"$py" -m ipykernel install --sys-prefix --name "$KERNEL" --display-name "$KERNEL_LABEL" >/dev/null
"$py" code/scripts/lab_env.py kernel-spec "$kernel_dir/kernel.json"
kernel_registered
echo "$want" > "$stamp"
trap - ERR INT TERM
rm -rf "$before" "$kernel_backup"
"$py" code/scripts/lab_env.py versions
