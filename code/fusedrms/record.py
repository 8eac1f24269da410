"""Record every GPU result the book shows, on the GPU this machine has.

    python -m fusedrms.record --list                    # chapters, their files, estimated seconds
    python -m fusedrms.record                           # every chapter -> recordings/<gpu>/
    python -m fusedrms.record --chapters 3,4 --out DIR  # a subset, into DIR
    python -m fusedrms.record --chapters 7,8 --tune     # also re-tune (writes DIR/tuning/*.json)
    python -m fusedrms.record --smoke --out /tmp/smoke  # every chapter at minimal sizes (~20 s each)
    python -m fusedrms.record --chapters 2 --ahead 7 --out DIR  # and chapter 7's long sweep, for a
                                                        # later --chapters 7 into DIR

Each chapter's experiment is ``record(out_dir, tune=False, log=print)`` in its companion module
``fusedrms.book.chNN``. Chapters run one after the other; a chapter that fails is logged (its
traceback in ``DIR/logs/chNN.log``) and the others still run. ``DIR/MANIFEST.json`` is rewritten
after every chapter, so a run cut short keeps what was done: the commit, date, GPU, driver and
versions, the command, each file with the chapter that produced it and its sha256, and per chapter
the sha256 of the sources it measured.

Running again into the same folder adds chapters to the same recording only on the same machine
(GPU, driver and versions) at the same commit, with the sources of the chapters already there
unchanged; otherwise record into a new folder.
Tuning tables are written into the recording only; install them into the package with
``python -m fusedrms.tuning install DIR``. The chapters show the reader's own recording for their
GPU when ``recordings/<gpu>/`` has one, else the committed H200 recording.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import importlib
import inspect
import sys
import time
import traceback
import uuid
from pathlib import Path

from . import env, records

CHAPTERS = {f"ch{n:02d}": f"fusedrms.book.ch{n:02d}" for n in (2, 3, 4, 5, 6, 7, 8, 9)}


class RecordError(RuntimeError):
    """A recording that cannot go ahead as asked, with what to do instead."""


def companion(chapter: str):
    return importlib.import_module(CHAPTERS[chapter])


def parse_chapters(text: str | None) -> list[str]:
    """``"2,3"``, ``"ch02,ch03"`` or None (all) -> ``["ch02", "ch03"]``, in book order."""
    if text is None or text.strip() in ("", "all"):
        return list(CHAPTERS)
    out = []
    for part in text.split(","):
        part = part.strip().lower().removeprefix("ch")
        if not part.isdigit() or f"ch{int(part):02d}" not in CHAPTERS:
            raise RecordError(f"unknown chapter {part!r}; chapters with a GPU recording: "
                              f"{', '.join(c[2:].lstrip('0') for c in CHAPTERS)}")
        out.append(f"ch{int(part):02d}")
    return [c for c in CHAPTERS if c in out]


SMOKE_ESTIMATE_S = 20  # per chapter: every record() at minimal sizes
# The whole book on an H200 in device calls of at most 10 minutes each (less a margin for the
# machine's start and the packing), at one commit. Chapter 6's grid times chapter 7's peers too
# (--then 7), the next call times chapter 7's fp16 and fp32 grid beside its own chapters (--ahead
# 7), and chapter 7 is then recorded into the same folder (RESULTS); the other groups each go into
# a folder of their own. "into": the call whose folder a call adds to.
DEVICE_CALL_S = 570
DEVICE_CALLS = ({"chapters": ("ch06",), "then": ("ch07",)},
                {"chapters": ("ch02", "ch03", "ch04"), "ahead": ("ch07",), "into": 1},
                {"chapters": ("ch07",), "into": 1},
                {"chapters": ("ch05", "ch08")},
                {"chapters": ("ch09",)})


def estimate_s(chapter: str, tune: bool = False, smoke: bool = False, ahead: bool = False) -> float:
    """Seconds on an H200; ``ahead``: the chapter's work a call before its own does (--ahead)."""
    mod = companion(chapter)
    if smoke:
        return SMOKE_ESTIMATE_S * (2 if tune else 1)
    if ahead:
        return mod.AHEAD_ESTIMATE_S
    return mod.ESTIMATE_S + (getattr(mod, "TUNING_ESTIMATE_S", 0) if tune else 0)


def call_estimate_s(call: dict) -> float:
    return (sum(estimate_s(c) for c in call["chapters"])
            + sum(estimate_s(c, ahead=True) for c in call.get("ahead", ())))


def listing() -> str:
    lines = [f"{'chapter':8s} {'~s (H200)':>10s} {'+ --tune':>9s}  files"]
    for chapter in CHAPTERS:
        mod = companion(chapter)
        files = list(mod.FILES) + [f"{f} (--tune)" for f in getattr(mod, "TUNING_FILES", {})]
        tune_s = getattr(mod, "TUNING_ESTIMATE_S", 0)
        lines.append(f"{chapter:8s} {mod.ESTIMATE_S:>10.0f} {('+' + str(tune_s)) if tune_s else '':>9s}"
                     f"  {', '.join(files)}")
    numbers = lambda group: ",".join(c[2:].lstrip("0") for c in group)  # noqa: E731
    for i, call in enumerate(DEVICE_CALLS, 1):
        lines.append(f"device call {i}: --chapters {numbers(call['chapters'])}"
                     + "".join(f" --{k} {numbers(call[k])}" for k in ("then", "ahead") if k in call)
                     + (f" into call {call['into']}'s folder" if "into" in call else "")
                     + f" (~{call_estimate_s(call):.0f} s of at most {DEVICE_CALL_S})")
    return "\n".join(lines)


def _machine(p: dict) -> dict:
    """What a recording holds fixed besides its commit: the GPU, backend, driver and versions."""
    return {"gpu": p["gpu"], "backend": p["backend"], "driver": p["driver"],
            "versions": {k: p[k] for k in ("cuda", "hip", "torch", "triton", "python")}}


def new_manifest(command: str) -> dict:
    p = records.provenance()
    return {"format": 1, "commit": p["commit"], "started": p["date"], **_machine(p),
            "command": command, "chapters": {}, "files": {}, "stale": {}}


def check_compatible(manifest: dict, chapters: list[str], smoke: bool = False) -> None:
    """Adding to an existing recording is allowed only at its commit, on its machine (GPU, driver
    and versions) and with unchanged sources."""
    if bool(manifest.get("smoke")) != smoke:
        raise RecordError("this folder holds a " + ("smoke" if manifest.get("smoke") else "real")
                          + " recording; smoke and real recordings never share a folder: use "
                            "another --out.")
    now = records.provenance()
    commit = now["commit"]
    if manifest.get("commit") != commit:
        raise RecordError(f"the recording in this folder was made at commit "
                          f"{str(manifest.get('commit'))[:10]}, this checkout is at {commit[:10]}: "
                          f"record into a new --out folder (or delete this one).")
    differ = [k for k, v in _machine(now).items() if manifest.get(k) != v]
    if differ:  # a folder copied to another machine: one recording is one machine's
        raise RecordError(f"the recording in this folder was made on {manifest.get('gpu')}; this "
                          f"machine differs in its {' and '.join(differ)} ({now['gpu']}): record "
                          f"into a new --out folder.")
    for chapter, entry in manifest.get("chapters", {}).items():
        recorded = entry.get("sources") or {}
        if records.hashes_now(recorded) != recorded and chapter not in chapters:
            raise RecordError(f"{chapter} in this folder was recorded from sources that changed "
                              f"since: re-record it too (--chapters ...,{chapter[2:].lstrip('0')}) "
                              f"or use a new --out folder.")


class _Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self):
        for s in self.streams:
            s.flush()


def _capture(out: Path, log_path: Path, call, fallback: list[Path]) -> tuple[dict, list[Path]]:
    """Run ``call()`` with its output also in ``log_path``: ({"status", maybe "error"}, every file
    it wrote in ``out``: those it returned, and those whose time changed, logs and listings).
    A failure is logged with its traceback; ``fallback`` then names what it left."""
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    with open(log_path, "w") as log_file:
        tee = _Tee(sys.stdout, log_file)
        with contextlib.redirect_stdout(tee):
            try:
                written, result = [Path(p) for p in call() or []], {"status": "ok"}
            except Exception as e:  # noqa: BLE001 - logged; the next chapter still runs
                traceback.print_exc(file=tee)
                written = [p for p in fallback if p.exists()]
                result = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:500]}
    extra = [p for p in out.rglob("*") if p.is_file() and p.name != records.MANIFEST
             and p != log_path and before.get(p) != p.stat().st_mtime_ns]
    return result, list(dict.fromkeys([*written, *extra]))


def _register(manifest: dict, out: Path, chapter: str, entry: dict, written: list[Path],
              produced_by: str) -> None:
    entry["files"] = [str(p.relative_to(out)) for p in written if p.exists()]
    for rel in entry["files"]:
        manifest["files"][rel] = {"chapter": chapter, "produced_by": produced_by,
                                  "sha256": records.sha256_file(out / rel)}
    manifest["files"][entry["log"]] = {"chapter": chapter, "produced_by": "fusedrms.record (log)",
                                       "sha256": records.sha256_file(out / entry["log"])}
    manifest["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    records.write_manifest(out, manifest)


def run(chapters: list[str], out: Path, tune: bool = False, command: str = "",
        require_gpu: bool = True, smoke: bool = False, then: list[str] | tuple = (),
        ahead: list[str] | tuple = ()) -> dict:
    """Record ``chapters`` into ``out``; returns the manifest (also written after each chapter).
    ``then``: chapters a later run adds to ``out``; what they share with these is done now.
    ``ahead``: chapters a later run adds to ``out`` whose own long work (their ``ahead()``) is
    done now, after ``chapters``, for a chapter longer than one device call."""
    for other, flag in ((then, "later (--then)"), (ahead, "ahead (--ahead)")):
        both = sorted(set(chapters) & set(other))
        if both:
            raise RecordError(f"{', '.join(both)} cannot be recorded now and also {flag}")
    lacking = [c for c in ahead if not callable(getattr(companion(c), "ahead", None))]
    if lacking:
        raise RecordError(f"{', '.join(lacking)} has no work to time ahead; record it with "
                          f"--chapters instead")
    if require_gpu:
        env.require_gpu("Recording the book's GPU results")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = records.read_manifest(out)
    if manifest is None:
        manifest = new_manifest(command)
        if smoke:
            manifest["smoke"] = True  # a pipeline check at minimal sizes: never the book's numbers
    else:
        check_compatible(manifest, chapters + list(ahead), smoke)
        manifest["command"] = (manifest.get("command", "") + " ; " + command).strip(" ;")
    (out / "logs").mkdir(exist_ok=True)
    total = (sum(estimate_s(c, tune, smoke) for c in chapters)
             + sum(SMOKE_ESTIMATE_S if smoke else estimate_s(c, ahead=True) for c in ahead))
    try:
        from tqdm.auto import tqdm
        bar = tqdm(total=round(total), unit="s", desc="recording", file=sys.stderr)
    except ImportError:  # progress is a convenience; the log lines carry the same information
        bar = None
    print(f"recording {', '.join(list(chapters) + [c + ' (ahead)' for c in ahead])} into {out} "
          f"(about {total:.0f} s on an H200)", flush=True)
    # what a chapter may share with a later one of this recording (chapter 6's grid times chapter
    # 7's peers when both are recorded, in this run or, with --then, in a later one into this
    # folder: check_compatible holds the commit and the sources, so the folder is one recording)
    this_run = {"id": manifest.setdefault("run_id", uuid.uuid4().hex),
                "chapters": tuple(chapters) + tuple(then) + tuple(ahead)}
    for chapter in chapters:
        mod = companion(chapter)
        est = estimate_s(chapter, tune, smoke)
        print(f"=== {chapter}: about {est:.0f} s ({_dt.datetime.now():%H:%M:%S})", flush=True)
        if bar is not None:
            bar.set_description(f"{chapter} (~{est:.0f} s)")
        entry = {"status": "running", "started": _dt.datetime.now(_dt.timezone.utc).isoformat(
            timespec="seconds"), "commit": manifest["commit"], "command": command, "tune": tune,
            "smoke": smoke, "sources": records.source_hashes(mod.SOURCES), "log": f"logs/{chapter}.log"}
        manifest["chapters"][chapter] = entry
        manifest["stale"].pop(chapter, None)
        records.write_manifest(out, manifest)
        t0 = time.time()
        kwargs = {"smoke": True} if smoke else {}
        if "run" in inspect.signature(mod.record).parameters:
            kwargs["run"] = this_run
        result, written = _capture(out, out / entry["log"],
                                   lambda: mod.record(out, tune=tune, log=print, **kwargs),
                                   [out / f for f in mod.FILES])
        entry.update(result, seconds=round(time.time() - t0, 1))
        _register(manifest, out, chapter, entry, written, f"{CHAPTERS[chapter]}.record")
        print(f"=== {chapter}: {entry['status']} in {entry['seconds']:.0f} s, "
              f"{len(entry['files'])} files{'; ' + entry['error'] if 'error' in entry else ''}",
              flush=True)
        if bar is not None:
            bar.update(round(est))
    for chapter in ahead:  # its files count as the chapter's; its own run finds them (run_id)
        mod = companion(chapter)
        print(f"=== {chapter} ahead: about {estimate_s(chapter, smoke=smoke, ahead=True):.0f} s "
              f"({_dt.datetime.now():%H:%M:%S})", flush=True)
        entry = {"status": "running", "started": _dt.datetime.now(_dt.timezone.utc).isoformat(
            timespec="seconds"), "commit": manifest["commit"], "command": command, "smoke": smoke,
            "log": f"logs/{chapter}_ahead.log"}
        manifest.setdefault("ahead", {})[chapter] = entry
        records.write_manifest(out, manifest)
        t0 = time.time()
        result, written = _capture(out, out / entry["log"],
                                   lambda: mod.ahead(out, log=print, smoke=smoke, run=this_run), [])
        entry.update(result, seconds=round(time.time() - t0, 1))
        _register(manifest, out, chapter, entry, written, f"{CHAPTERS[chapter]}.ahead")
        print(f"=== {chapter} ahead: {entry['status']} in {entry['seconds']:.0f} s"
              f"{'; ' + entry['error'] if 'error' in entry else ''}", flush=True)
    if bar is not None:
        bar.close()
    return manifest


def default_out() -> Path:
    slug = records.gpu_slug(env.current().gpu_name) or "cpu"
    return records.recordings_dir() / slug


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrms.record", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chapters", help="comma-separated chapter numbers (default: all): "
                                      + ",".join(c[2:].lstrip("0") for c in CHAPTERS))
    p.add_argument("--out", type=Path, help="the recording's folder (default: recordings/<gpu>/ in "
                                           "the checkout, which the chapters then show)")
    p.add_argument("--tune", action="store_true",
                   help="also run the long tuning steps (chapters 7 and 8); tables go to OUT/tuning/")
    p.add_argument("--smoke", action="store_true",
                   help="every chapter's record at minimal sizes (about 20 s each on an H200): a check "
                        "of the pipeline; the manifest marks it, and it never mixes with a real one")
    p.add_argument("--then", help="chapters a later call adds to the same --out (same commit): "
                                  "work they share is done now (with --chapters 6 --then 7, "
                                  "chapter 6's grid times chapter 7's peers, which --chapters 7 "
                                  "then reuses)")
    p.add_argument("--ahead", help="chapters a later call adds to the same --out (same commit) "
                                   "whose long sweep runs now, after --chapters (--ahead 7: chapter "
                                   "7's fp16 and fp32 grid, which --chapters 7 then reuses)")
    p.add_argument("--list", action="store_true", help="list chapters, files and estimates; record nothing")
    args = p.parse_args(argv)
    try:
        chapters = parse_chapters(args.chapters)
        then = parse_chapters(args.then) if args.then else []
        ahead = parse_chapters(args.ahead) if args.ahead else []
    except RecordError as e:
        p.error(str(e))
    if args.list:
        print(listing())
        return 0
    if not env.current().on_gpu:
        print("fusedrms.record: recording needs a GPU (NVIDIA or AMD); this machine has none. "
              "The chapters show the committed H200 recording instead.", file=sys.stderr)
        return 2
    command = " ".join(["python -m fusedrms.record", *(argv if argv is not None else sys.argv[1:])])
    try:
        out = args.out or (default_out().with_name(default_out().name + "-smoke") if args.smoke
                           else default_out())
        manifest = run(chapters, out, tune=args.tune, command=command, smoke=args.smoke, then=then,
                       ahead=ahead)
    except RecordError as e:
        print(f"fusedrms.record: {e}", file=sys.stderr)
        return 2
    failed = [c for c in chapters if manifest["chapters"][c]["status"] != "ok"]
    failed_ahead = [f"{c} ahead" for c in ahead if manifest["ahead"][c]["status"] != "ok"]
    print(f"done: {len(chapters) - len(failed)} of {len(chapters)} chapters recorded"
          + (f", {len(ahead)} ahead" if ahead else "")
          + (f"; failed: {', '.join(failed + failed_ahead)} (see logs/)"
             if failed or failed_ahead else ""))
    return 1 if failed or failed_ahead else 0


if __name__ == "__main__":
    sys.exit(main())
