"""One grader for every code answer: the reader's code runs in a child process, with a time limit.

A checker calls :func:`run` with the answer (HIP text, a @triton.jit kernel, or a Python function)
and a module-level function of its own. The child rebuilds the answer from its source
(:mod:`.reader_code`), calls ``function(answer, *args)`` and sends the value back; an exception it
raises comes back raised. When the reader's code crashes the child (a segmentation fault, an
abort, any signal, a nonzero exit) or runs past :data:`LIMIT_S`, :func:`run` raises
:class:`Failed`, which :func:`failure_feedback` turns into a verdict with a hint. The notebook
survives all of it.

``device="cpu"`` runs Triton's interpreter and HIP's CPU runtime: the verdict a machine without a
GPU gives, which a GPU machine asks for too, so both give the same one. ``device="gpu"`` compiles
for the GPU. CPU children fork from a server process that imported torch and triton once (a fork
takes milliseconds, a fresh Python seconds); GPU children start fresh, as CUDA does not survive a
fork. :func:`sanitizer_findings` runs a GPU child under compute-sanitizer.

Inside the child, :func:`clock_paused` stops the limit's clock (while compiling) and
:func:`progress` names the case at hand, so that a crash can say where it happened.
"""
from __future__ import annotations

from .. import env  # noqa: F401 - first: a child decides the interpreter before any @triton.jit

import atexit
import contextlib
import json
import os
import pickle
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from . import reader_code
from .core import Feedback, correct, one_line, portable_error, wrong

LIMIT_S = 60.0  # the reader's code, from the moment it starts
START_LIMIT_S = 300.0  # starting the child, rebuilding the answer, compiling (clock paused)
POLL_S = 0.02
CACHE_SIZE = 32
_CACHE: dict[bytes, tuple] = {}  # request -> (status, value): what a deterministic child returned
_LOCK = threading.Lock()


class Failed(Exception):
    """The child returned no value: ``kind`` is "signal", "exit", "timeout", "copy" (the answer
    could not be copied or rebuilt) or "start" (the checker's own process failed)."""

    def __init__(self, kind: str, detail: str = "", signal_number: int | None = None,
                 output: str = "", where: str = "", limit_s: float = 0.0):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind, self.detail, self.signal_number = kind, detail, signal_number
        self.output, self.where, self.limit_s = output, where, limit_s


def run(answer: Any, function: Callable, *args, device: str = "cpu", limit_s: float | None = None,
        cache: bool = False) -> Any:
    """``function(answer, *args)`` in a child process; its value. ``function`` is a module-level
    function (the child imports it by name); its arguments and value must pickle. ``cache``
    reuses the value of an identical earlier request (for deterministic functions)."""
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    request = _request(answer, function, args)
    key = device.encode() + b"\0" + request
    with _LOCK:
        if cache and key in _CACHE:
            return _unwrap(*_CACHE[key])
        limit = LIMIT_S if limit_s is None else limit_s
        try:
            status, value = _run_request(request, device, limit, function)
        except Failed as failed:
            if cache and failed.kind != "timeout":  # a timeout may be a busy machine's
                _remember(key, ("failed", failed))
            raise
        if cache:
            _remember(key, (status, value))
    return _unwrap(status, value)


def _request(answer, function, args) -> bytes:
    try:
        recipe = reader_code.copy_answer(answer)
    except reader_code.NotCopied as err:
        raise Failed("copy", str(err)) from None
    try:
        return reader_code.dumps({"answer": recipe, "function": function, "args": args})
    except reader_code.NotCopied as err:
        raise Failed("copy", str(err)) from None
    except Exception as err:  # noqa: BLE001
        raise Failed("copy", f"its parts cannot be sent to another process ({one_line(err)})") \
            from None


def _remember(key: bytes, entry: tuple) -> None:
    _CACHE[key] = entry
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))


def _unwrap(status: str, value):
    if status == "ok":
        return value
    if status in ("raised", "failed"):
        raise value
    raise Failed("copy", value)  # "broken": the copy could not be rebuilt there


def _run_request(request: bytes, device: str, limit: float, function, tool: str | None = None,
                 logs: dict | None = None) -> tuple:
    folder = Path(tempfile.mkdtemp(prefix="fusedrms-grader-"))
    try:
        (folder / "request.pkl").write_bytes(request)
        if device == "cpu" and tool is None and hasattr(os, "fork"):
            exit_status, timed_out = _fork_server_run(folder, limit, function)
        else:
            exit_status, timed_out = _one_shot(folder, device, limit, tool)
        return _outcome(folder, exit_status, timed_out, limit)
    finally:
        if logs is not None:
            logs["sanitizer"] = _read(folder / "sanitizer.log")
        shutil.rmtree(folder, ignore_errors=True)


def _outcome(folder: Path, exit_status: tuple, timed_out: bool, limit: float) -> tuple:
    """(status, value) from the child's result file, or :class:`Failed` saying why none came."""
    signal_number, code = exit_status
    result = folder / "result.pkl"
    if result.exists() and not timed_out:
        try:
            return reader_code.loads(result.read_bytes())
        except Exception as err:  # noqa: BLE001
            raise Failed("exit", f"its result could not be read ({one_line(err)})") from None
    output = _tail(folder / "output.txt")
    where = _read(folder / "progress")
    if timed_out:
        raise Failed("timeout", f"{limit:g} s", output=output, where=where, limit_s=limit)
    if signal_number:
        raise Failed("signal", _signal_name(signal_number), signal_number, output, where)
    raise Failed("exit", f"exit status {code}", output=output, where=where)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _tail(path: Path, limit: int = 300) -> str:
    """The last line the child printed that says something (not a traceback's frame)."""
    lines = [ln.strip() for ln in _read(path).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("File ", "Traceback", "^", "~"))]
    return lines[-1][:limit] if lines else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _deadline(folder: Path, submitted: float, limit: float) -> float:
    """When the child is stopped: ``limit`` after its clock last started (``START_LIMIT_S``
    while it is paused), and never later than twice both limits after it was submitted (a
    checker compiles at most twice in one child), so that code restarting the clock again and
    again (grader.clock_starts() in a loop) still ends."""
    latest = submitted + 2 * (START_LIMIT_S + limit)
    for name, allowed in (("paused", START_LIMIT_S), ("started", limit)):
        try:
            return min((folder / name).stat().st_mtime + allowed, latest)
        except OSError:
            pass
    return submitted + START_LIMIT_S


def _child_env(device: str, tool: str | None = None) -> dict:
    here = os.getcwd()
    path = os.pathsep.join(dict.fromkeys(p or here for p in sys.path))
    found = {**os.environ, "PYTHONPATH": path}
    if device == "cpu":
        found.update(FUSEDRMS_FORCE_CPU="1", TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="",
                     HIP_VISIBLE_DEVICES="")
    if tool is not None:  # one allocation per tensor: an access past one is past an allocation
        found["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    return found


# ---- CPU children: forked from a server that has imported torch and triton ----

_SERVER_MAIN = "from fusedrms.exercises.grader import _server_main; _server_main()"


class _ForkServer:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER_MAIN], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=_child_env("cpu"), cwd=os.getcwd(),
                                     start_new_session=True)
        self.buffer, self.ended, self.child = b"", False, None
        atexit.register(self.close)

    def alive(self) -> bool:
        return not self.ended and self.proc.poll() is None

    def message(self, timeout: float) -> dict | None:
        """The server's next line, or None when none came within ``timeout`` seconds."""
        end = time.time() + timeout
        while b"\n" not in self.buffer:
            left = end - time.time()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:  # the server ended
                self.ended = True
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        if self.child is not None:
            _kill(self.child)
            self.child = None
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=10)


_SERVER: list = [None]


def _kill(pid: int) -> None:
    """Kill a child and the processes it started (its own process group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _fork_server_run(folder: Path, limit: float, function) -> tuple:
    for attempt in (1, 2):  # a server that ended while idle is started again, once
        server = _SERVER[0]
        if server is None or not server.alive():
            server = _SERVER[0] = _ForkServer()
        module = getattr(function, "__module__", "") or ""
        warm = [module] if module.startswith("fusedrms.") else []
        try:
            server.proc.stdin.write(json.dumps({"folder": str(folder), "warm": warm}).encode()
                                    + b"\n")
            server.proc.stdin.flush()
        except OSError:
            server.close()
            continue
        submitted, pid, timed_out, killed = time.time(), None, False, 0.0
        try:
            while True:
                message = server.message(POLL_S)
                if message is None and not server.alive():
                    server.close()
                    if pid is None and attempt == 1:
                        break  # it died before forking: start another
                    raise Failed("start", "the checker's server process ended")
                if message and "forked" in message:
                    pid = server.child = message["forked"]
                elif message and "exit" in message:
                    server.child = None
                    status = message["exit"]
                    if os.WIFSIGNALED(status):
                        return (os.WTERMSIG(status), None), timed_out
                    return (None, os.WEXITSTATUS(status)), timed_out
                if pid is not None and not timed_out and time.time() > _deadline(
                        folder, submitted, limit):
                    _kill(pid)
                    timed_out, killed = True, time.time()
                elif timed_out and time.time() > killed + 30:  # the kill did not take
                    server.close()
                    return (signal.SIGKILL, None), True
                elif pid is None and time.time() > submitted + START_LIMIT_S:
                    server.close()
                    raise Failed("start", f"the checker's server did not answer in "
                                          f"{START_LIMIT_S:g} s")
        except BaseException:  # interrupted: no child left running, no server left waiting
            server.close()
            raise
    raise Failed("start", "the checker's server process could not be started")


def _server_main() -> None:
    """The server: import once, then fork one child per request and report how it ended."""
    import importlib

    _die_with_parent()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 1)  # anything an import prints must not reach the protocol
    import torch  # noqa: F401
    import triton  # noqa: F401

    from . import interpreter_audit  # noqa: F401

    while True:
        line = sys.stdin.readline()
        if not line:
            return  # the notebook (or test) process ended
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                os.setpgid(0, 0)  # the child and anything it starts: killed together
                _die_with_parent()
                protocol.close()
                output = os.open(Path(request["folder"], "output.txt"),
                                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(output, 1)
                os.dup2(output, 2)
                os.dup2(quiet, 0)
                _serve(request["folder"])
                code = 0
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        protocol.write(json.dumps({"forked": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        protocol.write(json.dumps({"exit": status}) + "\n")
        for name in request.get("warm", ()):
            with contextlib.suppress(Exception):
                importlib.import_module(name)  # the checker's own module: later forks have it


def _die_with_parent() -> None:
    """(Linux) end this process when its parent ends, so no child outlives a killed notebook."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# ---- GPU children (and compute-sanitizer): a fresh process each ----

_ONE_SHOT_MAIN = ("import sys; from fusedrms.exercises.grader import _one_shot_main; "
                  "_one_shot_main(sys.argv[1])")


def _one_shot(folder: Path, device: str, limit: float, tool: str | None) -> tuple:
    command = [sys.executable, "-c", _ONE_SHOT_MAIN, str(folder)]
    if tool is not None:
        command = [sanitizer_path(), "--tool", tool, "--print-limit", "3",
                   "--log-file", str(folder / "sanitizer.log"), *command]
    with open(folder / "output.txt", "wb") as output:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                stderr=subprocess.STDOUT, env=_child_env(device, tool),
                                cwd=os.getcwd(), start_new_session=True)
    submitted, timed_out = time.time(), False
    try:
        while True:
            try:
                code = proc.wait(timeout=POLL_S * 10)
                break
            except subprocess.TimeoutExpired:
                pass
            if not timed_out and time.time() > _deadline(folder, submitted, limit):
                _kill(proc.pid)
                timed_out = True
    except BaseException:  # an interrupted notebook leaves no child behind
        _kill(proc.pid)
        raise
    return ((-code, None) if code < 0 else (None, code)), timed_out


def _one_shot_main(folder: str) -> None:
    code = 70
    try:
        _serve(folder)
        code = 0
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


# ---- inside the child ----

_FOLDER: list = [None]


def _serve(folder) -> None:
    """Rebuild the answer, call the function, write (status, value) to result.pkl."""
    folder = Path(folder)
    _FOLDER[0] = folder

    def write(status, value):
        try:
            data = reader_code.dumps((status, value))
        except Exception as err:  # noqa: BLE001
            data = pickle.dumps(("broken", f"its result cannot be sent back ({one_line(err)})"))
        (folder / "result.tmp").write_bytes(data)
        os.replace(folder / "result.tmp", folder / "result.pkl")

    try:
        request = reader_code.loads((folder / "request.pkl").read_bytes())
        answer = reader_code.rebuild(request["answer"], folder / "code")
    except BaseException as err:  # noqa: BLE001 - the reader's module code runs here
        write("broken", f"the copy could not be built ({one_line(err)})")
        return
    clock_starts()
    try:
        value = request["function"](answer, *request["args"])
    except Exception as err:  # noqa: BLE001 - the reader's code: anything can happen
        write("raised", portable_error(err))
        return
    except BaseException as err:  # noqa: BLE001 - exit(), sys.exit(), raise KeyboardInterrupt:
        # the reader's code ended the run; raised in the notebook, it would escape every checker
        write("failed", Failed("exit", f"it raised {one_line(err).rstrip(': ')}",
                               where=_read(folder / "progress")))
        return
    write("ok", value)


def clock_starts() -> None:
    """(In the child) the limit's clock starts now."""
    folder = _FOLDER[0]
    if folder is not None:
        (folder / "started").touch()
        with contextlib.suppress(FileNotFoundError):
            (folder / "paused").unlink()


@contextlib.contextmanager
def clock_paused():
    """(In the child) the limit's clock stops inside the block: compiling is not the reader's
    code running (:data:`START_LIMIT_S` bounds it instead)."""
    folder = _FOLDER[0]
    if folder is not None:
        (folder / "paused").touch()
    try:
        yield
    finally:
        clock_starts()


class LibraryCall(str):
    """(A value a child sends back) the name of a library function the answer called where the
    reader was to write it (:func:`calls_to`)."""


class WatchSwitchedOff(RuntimeError):
    """(Raised in the child) the answer removed the profile :func:`calls_to` watches with."""


@contextlib.contextmanager
def calls_to(functions):
    """(In the child) the names of ``functions`` (Python functions) called inside the block, at
    any depth, under any name and in any thread the block starts: an answer that hands the work
    to the library's own implementation (directly, through a wrapper, through another library
    function or in a thread) is not the reader's. Inside the block sys.setprofile and
    threading.setprofile leave the watch on; an answer that removes it anyway gets
    :class:`WatchSwitchedOff` (a verdict, as any exception the answer raises)."""
    codes = {f.__code__: f"{f.__module__.removeprefix('fusedrms.')}.{f.__qualname__}"
             for f in functions}
    called: list[str] = []
    previous = sys.getprofile()
    previous_threads = getattr(threading, "getprofile", lambda: None)()
    setters = (sys.setprofile, threading.setprofile)

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            called.append(codes[frame.f_code])

    def keep_watching(_):
        """sys.setprofile and threading.setprofile inside the block: the watch stays (a thread
        the block starts sets its profile with sys.setprofile: the watch, too)."""
        setters[0](profile)

    sys.setprofile(profile)
    threading.setprofile(profile)  # threads the answer starts
    sys.setprofile = threading.setprofile = keep_watching
    try:
        yield called
    finally:
        switched_off = sys.getprofile() is not profile
        sys.setprofile, threading.setprofile = setters
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
    if switched_off:
        raise WatchSwitchedOff("it switched off the profile the checker watches calls to the "
                               "library's own answer with, so the checker cannot tell whose "
                               "answer this is")


def progress(where: str) -> None:
    """(In the child) the case now running, in words ("On 3x13"): a crash names it."""
    folder = _FOLDER[0]
    if folder is not None:
        (folder / "progress").write_text(where)


# ---- verdicts ----

SIGNAL_WORDS = {
    "SIGSEGV": "a segmentation fault: it read or wrote memory it does not own",
    "SIGBUS": "a bus error: it used an address no memory stands behind",
    "SIGABRT": "an abort: the C library stopped the process, most often because writes past the "
               "end of a buffer corrupted the heap",
    "SIGFPE": "an arithmetic fault: an integer division by zero",
    "SIGILL": "an illegal instruction",
    "SIGKILL": "a kill from outside: the machine may have run out of memory",
}
WHAT = {"triton": "kernel", "hip": "HIP code", "python": "function"}
HINTS = {
    ("signal", "triton"): "Mask every tl.load and tl.store (mask=offsets < cols) and check each "
                          "pointer: row * row_stride + column stays inside its tensor.",
    ("signal", "hip"): "Look for a pointer or an index past an array: a null pointer, shared "
                       "memory indexed past its slots (one per warp), a loop bound that is not "
                       "the row's.",
    ("signal", "python"): "Something your function launched read or wrote memory it does not "
                          "own: mask every load and store, and allocate each output as large as "
                          "what the kernel writes.",
    ("timeout", "triton"): "A loop whose condition never turns false? Loop with "
                           "range(0, cols, BLOCK): its end is fixed.",
    ("timeout", "hip"): "A loop whose condition never turns false, or a __syncthreads() that "
                        "some threads never reach while the others wait at it.",
    ("timeout", "python"): "A loop that never ends, in your function or in the kernel it "
                           "launches: check each loop's condition and step.",
    ("exit", None): "Something in your code ended the process (exit(), or memory ran out): run it "
                    "in a cell on the checker's shapes to see what happens.",
    ("copy", None): "Define it with def at the top level of a notebook cell, reading only modules, "
                    "@triton.jit functions, other functions, plain values (numbers, strings, "
                    "tensors) and classes whose body holds only values (class "
                    "BadInput(ValueError): pass).",
}


def interpreter_then_gpu(answer, collect: Callable, judge: Callable) -> Feedback:
    """The verdict on a function ``answer``: ``collect(answer)`` runs in a child under Triton's
    interpreter and, where ``judge(its value, on_gpu=False)`` passes on a machine with a GPU,
    again in a child compiled for the GPU; this process judges both. A crash or a timeout in
    either child is the verdict."""
    try:
        verdict = judge(run(answer, collect, cache=True), False)
        if not verdict or not env.current().on_gpu:
            return verdict
        on_gpu = judge(run(answer, collect, device="gpu"), True)
    except Failed as failed:
        return failure_feedback(failed, "python")
    if not on_gpu:
        return wrong(f"On the GPU: {on_gpu.message}", on_gpu.hint)
    return correct(verdict.message.rstrip(".") + ", in Triton's interpreter and compiled for the "
                                                  "GPU.")


def failure_feedback(failed: Failed, language: str = "python", where: str = "") -> Feedback:
    """The verdict for code that gave no value: what happened, where, and what to look at.
    ``language`` is "triton", "hip" or "python" (a function)."""
    what = WHAT.get(language, "code")
    place = where or failed.where
    prefix = f"{place} your" if place else "Your"
    hint = HINTS.get((failed.kind, language)) or HINTS.get((failed.kind, None), "")
    said = f" Its last message: {failed.output!r}." if failed.output else ""
    if failed.kind == "signal":
        name = _signal_name(failed.signal_number)
        words = SIGNAL_WORDS.get(name, f"signal {failed.signal_number}")
        message = (f"{prefix} {what} crashed the process that ran it ({name}, {words}).{said} "
                   f"This notebook was not affected.")
    elif failed.kind == "timeout":
        message = (f"{prefix} {what} did not finish within {failed.limit_s:g} s, so the checker "
                   f"stopped it. This notebook was not affected.")
    elif failed.kind == "exit":
        message = f"{prefix} {what} ended the process that ran it ({failed.detail}).{said}"
    elif failed.kind == "copy":
        message = f"The checker could not copy your {what} into the process that runs it: " \
                  f"{failed.detail}."
    else:
        return Feedback(False, f"The checker's own process failed ({failed.detail}).",
                        "Run the cell again; if it fails again, restart the kernel.",
                        error=f"Failed: {failed}")
    return wrong(message, hint)


# ---- compute-sanitizer (NVIDIA GPUs) ----


def sanitizer_path() -> str | None:
    """compute-sanitizer, if this machine has it (on PATH, or in the CUDA toolkit's bin)."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        candidate = Path(root or "/nonexistent", "bin", "compute-sanitizer")
        if candidate.exists():
            return str(candidate)
    return None


def sanitizer_findings(answer, function: Callable, *args, tool: str = "memcheck",
                       limit_s: float | None = None) -> tuple[int, str] | None:
    """Run ``function(answer, *args)`` on the GPU under compute-sanitizer's ``tool`` (memcheck:
    out-of-bounds and misaligned accesses; racecheck: shared-memory races): (the number of
    errors it reports, the first one in words), or None when compute-sanitizer is not here.
    :class:`Failed` as :func:`run` raises it."""
    if sanitizer_path() is None:
        return None
    request = _request(answer, function, args)
    limit = 4 * (LIMIT_S if limit_s is None else limit_s)  # the sanitizer slows kernels down
    logs: dict = {}
    with _LOCK:
        try:
            _run_request(request, "gpu", limit, function, tool, logs)
        except Exception:  # noqa: BLE001 - what the code itself does, the plain GPU run reports
            pass
    return parse_sanitizer_log(logs.get("sanitizer", ""))


def parse_sanitizer_log(log: str) -> tuple[int, str]:
    """(errors, the first in words) from compute-sanitizer's log."""
    counts = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", log)]
    counts += [int(n) for n in re.findall(r"RACECHECK SUMMARY: (\d+) hazard", log)]
    first = ""
    for line in log.splitlines():
        text = line.strip().lstrip("=").strip()
        if re.match(r"(Invalid|Error|Race|Program hit|Barrier|Misaligned|Out of bounds)", text):
            first = text[:300]
            break
    errors = max(counts) if counts else (1 if first else 0)
    return errors, first
