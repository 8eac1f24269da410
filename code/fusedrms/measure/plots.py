"""Charts of benchmark results: achieved bandwidth and percent of the floor against data size.

    python -m fusedrms.measure.plots bench_grid.json --out bench_plot     # bench_plot.png + .svg
    python -m fusedrms.measure.plots                                      # the recorded H200 grid

Each panel is one dtype. The x axis is the bytes the op must move (the traffic model's count), so
a line climbing to the copy bandwidth (top row) or to 100% (bottom row) is a kernel reaching the
floor; a flat, low start is the launch-bound region, where the data is too small to matter.
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from . import harness
from .. import cli, records

MARKERS = "osD^v<>ph*"


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def ok_records(doc: dict, sweep: str | None = "grid", op: str | None = None,
               mode: str = "cold") -> list[dict]:
    """Records worth drawing: measured (status ok) and priced (a floor exists)."""
    recs = [r for r in doc["records"] if r.get("status") == "ok"
            and r.get("achieved_GBps") is not None and r.get("mode") == mode]
    if sweep is not None:
        recs = [r for r in recs if r.get("sweep") == sweep]
    if op is not None:
        recs = [r for r in recs if r.get("op") == op]
    return recs


def bandwidth_figure(doc: dict, sweep: str | None = "grid", op: str | None = None,
                     mode: str = "cold", title: str | None = None):
    """Two rows (GB/s, % of floor) x one column per dtype; one line per implementation."""
    recs = ok_records(doc, sweep, op, mode)
    if not recs:
        raise ValueError(f"nothing to draw: no measured records with a floor for sweep={sweep!r}, "
                         f"op={op!r}, mode={mode!r}")
    order = {d: i for i, d in enumerate(harness.DTYPES)}
    dtypes = sorted({r["dtype"] for r in recs}, key=lambda d: order.get(d, 99))
    impls = sorted({r["impl"] for r in recs})
    fig = _figure(4.2 * len(dtypes) + 1.8, 6.4)
    axes = fig.subplots(2, len(dtypes), squeeze=False, sharex="col")
    copy = doc.get("provenance", {}).get("copy_GBps_per_process")
    copy_bw = sorted(copy)[len(copy) // 2] if copy else recs[0].get("copy_GBps")
    l2 = doc.get("provenance", {}).get("l2_bytes")
    for j, dt in enumerate(dtypes):
        top, bottom = axes[0][j], axes[1][j]
        for k, name in enumerate(impls):
            pts = sorted((r["bytes"], r["achieved_GBps"], r["pct_of_floor"]) for r in recs
                         if r["dtype"] == dt and r["impl"] == name)
            if not pts:
                continue
            xs = [p[0] / 1e6 for p in pts]
            style = dict(marker=MARKERS[k % len(MARKERS)], markersize=4, linewidth=1.2,
                         label=name, linestyle="-" if not name.startswith("torch.") else "--")
            top.plot(xs, [p[1] for p in pts], **style)
            bottom.plot(xs, [p[2] for p in pts], **style)
        if copy_bw:
            top.axhline(copy_bw, color="black", linewidth=0.8, linestyle=":")
            top.text(0.02, 0.97, f"copy {copy_bw:.0f} GB/s", transform=top.transAxes,
                     va="top", fontsize=8)
        bottom.axhline(100, color="black", linewidth=0.8, linestyle=":")
        for ax in (top, bottom):
            ax.set_xscale("log")
            ax.grid(True, which="both", alpha=0.25)
            if l2:
                ax.axvline(l2 / 1e6, color="gray", linewidth=0.8, linestyle="-.")
        if l2:
            top.text(l2 / 1e6, 0.03, " L2 size", transform=top.get_xaxis_transform(),
                     fontsize=8, color="gray")
        top.set_title(f"{dt}")
        bottom.set_xlabel("bytes the op must move (MB, traffic model)")
        if j == 0:
            top.set_ylabel("achieved GB/s")
            bottom.set_ylabel("% of the copy floor")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8)
    ops = sorted({r["op"] for r in recs})
    prov = doc.get("provenance")
    subtitle = records.describe(doc) if prov and "gpu" in prov else ""
    fig.suptitle((title or f"{', '.join(ops)}: median of process medians, L2 {mode}")
                 + (f"\n{subtitle}" if subtitle else ""), fontsize=9)
    return fig


def compare_figure(recorded: dict, live: dict, op: str = "add_rmsnorm", mode: str = "cold"):
    """Recorded against live % of floor, case by case (same impl, shape and dtype)."""
    def key(r):
        return (r["impl"], r["rows"], r["cols"], r["dtype"])

    rec = {key(r): r for r in ok_records(recorded, None, op, mode)}
    pairs = [(rec[key(r)], r) for r in ok_records(live, None, op, mode) if key(r) in rec]
    if not pairs:
        raise ValueError("no case was measured both in the recorded file and in the live run")
    fig = _figure(5.2, 4.2)
    ax = fig.subplots()
    impls = sorted({a["impl"] for a, _ in pairs})
    for k, name in enumerate(impls):
        xs = [a["pct_of_floor"] for a, b in pairs if a["impl"] == name]
        ys = [b["pct_of_floor"] for a, b in pairs if a["impl"] == name]
        ax.scatter(xs, ys, marker=MARKERS[k % len(MARKERS)], label=name, s=18)
    hi = max(max(a["pct_of_floor"], b["pct_of_floor"]) for a, b in pairs) * 1.05
    ax.plot([0, hi], [0, hi], color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel(f"recorded on {recorded['provenance'].get('gpu', '?')}: % of floor")
    ax.set_ylabel(f"this machine ({live['provenance'].get('gpu', '?')}): % of floor")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.25)
    return fig


def save(fig, stem: str | Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.svg``; return both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(paths[0])
    fig.savefig(paths[1])
    return paths


def png(fig):
    """The figure as an inline PNG for a notebook (no pyplot backend needed)."""
    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return Image(data=buf.getvalue())


def plot_file(path_or_name: str | Path = "bench_grid", out: str | Path = "bench_plot",
              sweep: str | None = "grid", op: str | None = None) -> list[Path]:
    """Load a result file (or a recorded name) and write its chart as PNG + SVG."""
    doc = harness.load(path_or_name)
    if sweep and not any(r.get("sweep") == sweep for r in doc["records"]):
        sweep = None  # a file from `bench run` has its own sweep name
    return save(bandwidth_figure(doc, sweep, op), out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fusedrms.measure.plots", description=__doc__.split("\n")[0])
    p.add_argument("file", nargs="?", default="bench_grid", type=cli.result_file(),
                   help="a result JSON, or the name of a recorded file (default bench_grid)")
    p.add_argument("--out", default="bench_plot", type=cli.output_file,
                   help="output stem: STEM.png and STEM.svg")
    p.add_argument("--sweep", default="grid")
    p.add_argument("--op", default=None, type=cli.op)
    a = p.parse_args(argv)
    try:
        for path in plot_file(a.file, a.out, a.sweep, a.op):
            print(f"wrote {path}")
    except (FileNotFoundError, ValueError) as e:
        print(f"fusedrms.measure.plots: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
