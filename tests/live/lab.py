"""A throwaway JupyterLab server and a reader's view of a notebook in it (Playwright).

:class:`LabServer` starts ``python -m jupyterlab`` on 127.0.0.1 with a free port, a random token,
no browser, and every Jupyter/IPython directory (config, data, runtime, settings, workspaces) in a
temporary folder, so nothing touches the user's files; the notebooks are copies, so running them
never dirties the committed ones. :meth:`LabServer.stop` ends the server's process group and any
kernel it started (kernels run in sessions of their own), by process id.

:class:`KernelMessages` reads what kernels send the page over their websockets (both the JSON and
the binary ``v1.kernel.websocket.jupyter.org`` framing) and keeps every error and stderr output, so
a test can assert that the kernel printed no error, from a cell or from a widget callback.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

# User settings for the throwaway server: no autosave (the copies stay as they are), every cell
# kept in the DOM (JupyterLab 4 can window long notebooks), no news or update checks (no network).
SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"checkForUpdates": False, "fetchNews": "false"},
}
START_TIMEOUT_S = 90
UNFOLD_WAIT_MS = 3_000  # a click on a live node opens it within a frame; longer means it was lost


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_mentioning(text: str) -> list[int]:
    """Process ids whose command line contains ``text`` (from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


class LabServer:
    def __init__(self, root: Path, notebooks: list[Path]):
        self.root = root
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "server.log"
        work = root / "notebooks"
        work.mkdir()
        for nb in notebooks:
            shutil.copy(nb, work / nb.name)
        dirs = {name: root / name for name in ("config", "data", "runtime", "settings",
                                               "workspaces", "ipython")}
        for d in dirs.values():
            d.mkdir()
        self.runtime_dir = str(dirs["runtime"])  # named in every kernel's command line
        for plugin, values in SETTINGS.items():
            path = dirs["settings"] / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {**os.environ,
               "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
               "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
               "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
               "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
               "IPYTHONDIR": str(dirs["ipython"]), "PYTHONUNBUFFERED": "1"}
        env.pop("JUPYTER_TOKEN", None)
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
               f"--port={self.port}", "--port-retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly", "--ServerApp.terminals_enabled=False",
               "--ServerApp.shutdown_no_activity_timeout=900"]  # a leaked server ends by itself
        if os.geteuid() == 0:  # CI runs as root
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        linux = sys.platform == "linux"
        self.process = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=work,
            start_new_session=True, preexec_fn=_die_with_parent if linux else None)
        try:
            self._wait_until_up()
        except BaseException:
            self.stop()
            raise

    def _wait_until_up(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.process.returncode}:\n"
                                   f"{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}",
                                            timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)  # polling a port: there is no event to wait on
        raise RuntimeError(f"JupyterLab did not answer within {START_TIMEOUT_S} s:\n{self.log()}")

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self):
        """SIGTERM the server's process group (the server shuts its kernels down), then SIGKILL
        what is left: the group, and each kernel (kernels run in sessions of their own)."""
        kernels = [p for p in _processes_mentioning(self.runtime_dir) if p != self.process.pid]
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.process.pid, signal.SIGKILL)
        for pid in kernels:
            if pid in _processes_mentioning(self.runtime_dir):  # still ours, not a reused id
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.process.wait(timeout=15)
        self._log.close()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_parent():  # runs in the child before exec: Linux ends it if the test process dies
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _decode_v1(payload: bytes) -> dict | None:
    """A binary ``v1.kernel.websocket.jupyter.org`` frame: 8-byte count n, n 8-byte offsets, then
    the parts channel, header, parent_header, metadata, content, buffers..."""
    n = int.from_bytes(payload[:8], "little")
    offsets = [int.from_bytes(payload[8 + 8 * i:16 + 8 * i], "little") for i in range(n)]
    parts = [payload[a:b] for a, b in zip(offsets, offsets[1:])]
    if len(parts) < 5:
        return None
    return {"channel": parts[0].decode(), "header": json.loads(parts[1]),
            "parent_header": json.loads(parts[2]), "content": json.loads(parts[4])}


def decode_kernel_frame(payload) -> dict | None:
    """channel, header, parent_header and content of one kernel websocket message."""
    try:
        if isinstance(payload, (bytes, bytearray)):
            return _decode_v1(bytes(payload))
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError, IndexError):
        return None


class KernelMessages:
    """Collects the errors and stderr text the page's kernels send (attach before opening)."""

    # When a notebook opens, JupyterLab's widget manager asks the kernel for its widgets through a
    # "jupyter.widget.control" comm, before any cell has imported ipywidgets; ipykernel answers on
    # stderr that the target is unknown, then that the comm does not exist. Harmless, and only
    # these exact messages about that comm are let through.
    CONTROL_TARGET = "jupyter.widget.control"

    def __init__(self, page):
        self.problems: list[str] = []
        self._control_comms: set[str] = set()
        page.on("websocket", self._watch)

    def _watch(self, ws):
        if "/api/kernels/" in ws.url:
            ws.on("framesent", self._sent)
            ws.on("framereceived", self._received)

    def _sent(self, payload):
        msg = decode_kernel_frame(payload)
        if msg and msg.get("header", {}).get("msg_type") == "comm_open" \
                and msg.get("content", {}).get("target_name") == self.CONTROL_TARGET:
            self._control_comms.add(msg["content"].get("comm_id", ""))

    def _harmless(self, text: str) -> bool:
        text = text.strip()
        return (text == f"No such comm target registered: {self.CONTROL_TARGET}"
                or text.removeprefix("No such comm: ") in self._control_comms)

    def _received(self, payload):
        msg = decode_kernel_frame(payload)
        if not msg:
            return
        kind = msg.get("header", {}).get("msg_type")
        content = msg.get("content", {})
        if kind == "error":
            self.problems.append(f"{content.get('ename')}: {content.get('evalue')}")
        elif kind == "stream" and content.get("name") == "stderr" \
                and not self._harmless(content.get("text", "")):
            self.problems.append(f"stderr: {content.get('text', '')}")


# What the server's log shows when a kernel fails outside a cell: a callback's traceback (ipykernel
# logs exceptions in comm handlers to its own stderr, which the server's log collects), a death.
KERNEL_LOG_ERROR = re.compile(r"Traceback \(most recent call last\)|Exception in comm_msg|"
                              r"Kernel died|KernelRestarter: restarting")


KERNEL_READY = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel && panel.sessionContext && panel.sessionContext.session
                 && panel.sessionContext.session.kernel;
  return !!kernel && kernel.connectionStatus === "connected" && kernel.status === "idle";
}"""
# Every code cell has run (its execution count, and idle), or a cell failed (Run All stops
# there). Read from the cells' models: a cell whose source is collapsed (jupyter.source_hidden)
# shows no prompt.
ALL_CELLS_RAN_OR_ONE_FAILED = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const code = [...panel.content.model.cells].filter(c => c.type === "code");
  const failed = c => [...Array(c.outputs.length).keys()]
                      .some(i => c.outputs.get(i).type === "error");
  if (code.some(failed)) return true;
  return code.length > 0
         && code.every(c => c.executionCount !== null && c.executionState === "idle");
}"""
# What the markdown cells at the given indices show for their {eval} names: the kernel's answer
# (jupyterlab-myst keeps it in the cell's metadata "user_expressions", once the cell has run),
# the rendered text, and the names still shown as code, i.e. as placeholders.
INLINE_VALUES = """(cells) => {
  const widgets = window.jupyterapp.shell.currentWidget.content.widgets;
  return cells.map(([index, names]) => {
    const cell = widgets[index];
    const codes = [...cell.node.querySelectorAll("code")]
                  .filter(c => !c.closest(".jp-InputArea-editor"))
                  .map(c => c.textContent.trim());
    const results = {};
    for (const e of cell.model.getMetadata("user_expressions") || []) {
      results[e.expression] = e.result;
    }
    return {index, names, results, text: cell.node.innerText,
            placeholders: names.filter(n => codes.includes(n))};
  });
}"""
# Each of those cells has an answer for every name and shows none of them as a placeholder.
INLINE_VALUES_SETTLED = f"""(cells) => ({INLINE_VALUES})(cells).every(
  c => c.names.every(n => n in c.results) && c.placeholders.length === 0)"""


class Notebook:
    """One notebook open in JupyterLab in its own browser context, as a reader has it."""

    def __init__(self, browser, lab: LabServer, name: str, timeout_ms: int):
        self.lab, self.name = lab, name
        self.context = browser.new_context(viewport={"width": 1300, "height": 1000},
                                           service_workers="block")
        self.context.set_default_timeout(timeout_ms)
        self.context.route("**/*", self._local_only)
        self.foreign: list[str] = []
        self.page_errors: list[str] = []
        self.page = self.context.new_page()
        self.kernel = KernelMessages(self.page)
        self.page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        self.page.goto(lab.notebook_url(quote(name)), wait_until="load")
        self.page.wait_for_selector(".jp-NotebookPanel .jp-Cell")

    def _local_only(self, route):
        if route.request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:")):
            route.continue_()
        else:
            self.foreign.append(route.request.url)
            route.abort()

    def wait_for_kernel(self, timeout_ms: int | None = None):
        self.page.wait_for_function(KERNEL_READY, timeout=timeout_ms)

    def run_all(self, timeout_ms: int):
        """Run > Run All Cells, once the kernel is connected (earlier, JupyterLab asks which
        kernel to start), and wait until every code cell has its execution count."""
        self.wait_for_kernel(timeout_ms)
        self.page.evaluate(
            "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        self.page.wait_for_function(ALL_CELLS_RAN_OR_ONE_FAILED, timeout=timeout_ms, polling=250)
        self.wait_for_kernel(timeout_ms)

    def inline_values(self, names_by_cell: dict[int, list[str]], timeout_ms: int) -> list[dict]:
        """What each markdown cell (by index) shows for its ``{eval}`` names, once every one has
        the kernel's answer and none is left as a placeholder (or ``timeout_ms`` passed: the
        caller's assertion then says which): index, names, results (name -> the kernel's
        answer), text (as rendered), placeholders (names still shown as code)."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        cells = [[index, names] for index, names in sorted(names_by_cell.items())]
        try:
            self.page.wait_for_function(INLINE_VALUES_SETTLED, arg=cells, timeout=timeout_ms,
                                        polling=250)
        except PlaywrightTimeout:
            pass
        return self.page.evaluate(INLINE_VALUES, cells)

    def code_cell(self, source_text: str):
        """The code cell whose source contains ``source_text``."""
        cells = self.page.locator(".jp-CodeCell").filter(
            has=self.page.locator(".jp-InputArea-editor", has_text=source_text))
        assert cells.count() == 1, f"{self.name}: {cells.count()} cells contain {source_text!r}"
        return cells.first

    def output_with(self, selector: str):
        """The output area that holds ``selector`` (a widget's class)."""
        return self.page.locator(".jp-OutputArea-output").filter(has=self.page.locator(selector))

    def unfold(self, details, timeout_ms: int):
        """Open a folded ``<details>`` as a reader does, by clicking its summary, and wait until
        its body shows. jupyterlab-myst renders a markdown cell again when the cell runs or the
        kernel's answers for its values arrive, and a click on the node it replaces is lost (the
        new node is folded): so click again, but only while the details are folded (a second
        click on an open one would fold it)."""
        from playwright.sync_api import expect

        deadline = time.monotonic() + timeout_ms / 1000
        body = details.locator(".details-body")
        while True:
            if details.get_attribute("open") is None:
                details.locator("summary").click()
            try:
                expect(body).to_be_visible(timeout=UNFOLD_WAIT_MS)
                return
            except AssertionError:
                if time.monotonic() > deadline:
                    raise

    def edit_and_run(self, cell, source: str):
        """Replace a cell's source as a reader types it, then Shift+Enter."""
        cell.locator(".cm-content").click()
        self.page.keyboard.press("Control+A")
        self.page.keyboard.insert_text(source)
        self.page.keyboard.press("Shift+Enter")

    def problems(self) -> list[str]:
        """Kernel errors and stderr, page errors, requests to other hosts, tracebacks in the
        server's log (the kernels' own stderr lands there)."""
        log = [line for line in self.lab.log().splitlines() if KERNEL_LOG_ERROR.search(line)]
        return ([f"kernel: {p}" for p in self.kernel.problems]
                + [f"page error: {e}" for e in self.page_errors]
                + [f"request to another host: {u}" for u in self.foreign]
                + [f"server log: {line}" for line in log])

    def close(self):
        self.context.close()
