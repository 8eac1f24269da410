"""Chapter 2's pictures of the traffic model: a roofline, ideal time by model width, a calculator.

Everything here draws numbers computed by :mod:`fusedrms.traffic`; nothing is typed in. The plots
return a closed ``matplotlib.figure.Figure`` (Jupyter shows it; ``fig.savefig`` writes it). The calculator
is an ipywidgets form whose Python callbacks need a live kernel; a static page shows
:func:`width_table` and :func:`time_by_width` instead.
"""
from __future__ import annotations

from html import escape
from typing import Iterable, Sequence

from matplotlib.figure import Figure

from .. import records, traffic


def _figure(figsize) -> Figure:
    """A figure Jupyter shows once when it is returned (pyplot registers the inline display)."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=figsize)
    plt.close(fig)  # not shown again at the end of the cell
    return fig


def _axes(ax, figsize):
    """``ax`` (drawn into a figure the caller made, e.g. the book's page.figure) or a new
    figure's axes; and whether this module owns the figure's layout."""
    if ax is not None:
        return ax, False
    return _figure(figsize).subplots(), True


def _colours() -> list[str]:
    """The active matplotlib colour cycle (the book's colour-blind-safe one on its pages)."""
    import matplotlib

    return matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]

# Hidden sizes (the row width RMSNorm sees) of public models, from their papers or model cards.
# name -> (width, key in book/references.bib)
MODEL_WIDTHS = {
    "Llama 3.2 1B": (2048, "meta_llama32"),
    "Llama 3.2 3B": (3072, "meta_llama32"),
    "Llama 3.1 8B": (4096, "dubey2024llama3"),
    "LLaMA 13B": (5120, "touvron2023llama"),
    "DeepSeek-V3": (7168, "deepseek2024v3"),
    "Llama 3.1 70B": (8192, "dubey2024llama3"),
    "Llama 3.1 405B": (16384, "dubey2024llama3"),
}

def roofline(estimates: Sequence[traffic.Estimate], bandwidth_GBps: float, peak_tflops: float,
             title: str = "", figsize=(7.5, 4.6), ax=None) -> Figure:
    """Attainable FLOP/s against intensity; each design sits on the ceiling at its intensity."""
    import numpy as np

    ax, own = _axes(ax, figsize)
    fig, colours = ax.figure, _colours()
    ridge = peak_tflops * 1000 / bandwidth_GBps  # flop/byte where the two ceilings meet
    lo = min(min(e.intensity for e in estimates) / 4, 0.05)
    hi = max(ridge * 8, 100)
    i = np.logspace(np.log10(lo), np.log10(hi), 200)
    attainable = np.minimum(i * bandwidth_GBps / 1000, peak_tflops)  # TFLOP/s
    ax.plot(i, attainable, color="black", lw=2)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.1f} flop/B", (ridge, peak_tflops), textcoords="offset points",
                xytext=(4, -14), fontsize="small", color="grey")
    ax.annotate(f"{bandwidth_GBps:,.0f} GB/s", (lo * 4, lo * 4 * bandwidth_GBps / 1000),
                textcoords="offset points", xytext=(-6, 6), fontsize="small", ha="right")
    ax.annotate(f"{peak_tflops:g} TFLOP/s (fp32)", (hi / 30, peak_tflops),
                textcoords="offset points", xytext=(0, 4), fontsize="small")
    for n, e in enumerate(estimates):
        y = min(e.intensity * bandwidth_GBps / 1000, peak_tflops)
        color = colours[n % len(colours)]
        ax.scatter([e.intensity], [y], color=color, zorder=3, s=36,
                   label=f"{e.label or e.step} ({e.intensity:.2f} flop/B)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of global memory)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_xlim(lo, hi)
    ax.set_title(title or "Roofline")
    ax.legend(fontsize="small", loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    if own:
        fig.tight_layout()
    return fig


def traffic_bars(estimates: Sequence[traffic.Estimate], title: str = "",
                 figsize=(7.5, 3.2), ax=None) -> Figure:
    """One bar per design, one segment per tensor access (reads blue, writes orange), in
    row-trips; kernel boundaries drawn as black ticks."""
    ax, own = _axes(ax, (figsize[0], max(figsize[1], 0.55 * len(estimates) + 1.2)))
    fig, (read_colour, write_colour) = ax.figure, _colours()[:2]
    for n, e in enumerate(estimates):
        unit = e.rows * e.cols * traffic.DTYPE_BYTES[e.dtype]  # one row-trip in bytes
        left = 0.0
        for k in e.kernels:
            for kind, accesses in (("read", k.reads), ("write", k.writes)):
                for tensor, nbytes in accesses:
                    width = nbytes / unit
                    ax.barh(n, width, left=left, height=0.6, edgecolor="white",
                            color=read_colour if kind == "read" else write_colour)
                    if width >= 0.3:
                        ax.text(left + width / 2, n, tensor, ha="center", va="center",
                                fontsize="small", color="white")
                    left += width
            ax.plot([left, left], [n - 0.38, n + 0.38], color="black", lw=1.5)
    ax.set_yticks(range(len(estimates)))
    ax.set_yticklabels([e.label or e.step for e in estimates])
    ax.invert_yaxis()
    ax.set_xlabel("row-trips of global memory\n(blue: read, orange: written; a tick ends a kernel)")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.25)
    ax.grid(False, axis="y")
    if own:
        fig.tight_layout()
    return fig


def width_table(steps: Iterable[str], widths: dict | None = None, rows: int = 4096,
                dtype="bf16", bandwidth_GBps: float | None = None) -> list[dict]:
    """One record per (model width, step): bytes, launches, row-trips, ideal µs (at
    ``bandwidth_GBps``, by default the book's copy floor)."""
    widths = widths or MODEL_WIDTHS
    bandwidth_GBps = bandwidth_GBps or records.copy_floor_GBps()
    out = []
    for model, (cols, _) in widths.items():
        for step in steps:
            e = traffic.price(step, rows, cols, dtype, bandwidth_GBps)
            out.append({"model": model, "cols": cols, "step": step, "MB": e.bytes_total / 1e6,
                        "launches": e.launches, "row_trips": float(e.row_trips),
                        "ideal_us": e.ideal_us})
    return out


def format_width_table(records: list[dict]) -> str:
    """Models down, steps across, ideal µs in the cells (text)."""
    steps = list(dict.fromkeys(r["step"] for r in records))
    models = list(dict.fromkeys((r["model"], r["cols"]) for r in records))
    cell = {(r["model"], r["step"]): r["ideal_us"] for r in records}
    head = ["model", "cols", *steps]
    body = [[m, str(c), *(f"{cell[(m, s)]:.2f}" for s in steps)] for m, c in models]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    fmt = lambda row: "  ".join(v.ljust(w) if i == 0 else v.rjust(w)  # noqa: E731
                                for i, (v, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(head), *map(fmt, body)])


def time_by_width(steps: Sequence[str], rows: int = 4096, dtype="bf16",
                  bandwidth_GBps: float | None = None,
                  widths: dict | None = None, bandwidth_label: str = "",
                  figsize=(7.5, 4.2), ax=None) -> Figure:
    """Ideal µs of each step across model widths (the static page's calculator), at
    ``bandwidth_GBps``, by default the book's copy floor."""
    widths = widths or MODEL_WIDTHS
    bandwidth_GBps = bandwidth_GBps or records.copy_floor_GBps()
    ax, own = _axes(ax, figsize)
    fig, colours = ax.figure, _colours()
    cols = [c for c, _ in widths.values()]
    for n, step in enumerate(steps):
        us = [traffic.price(step, rows, c, dtype, bandwidth_GBps).ideal_us for c in cols]
        ax.plot(cols, us, marker="o", color=colours[n % len(colours)],
                label=traffic.get_step(step).label)
    ax.set_xticks(cols)
    ax.set_xticklabels([f"{m} ({c})" for m, (c, _) in widths.items()], fontsize="small",
                       rotation=35, ha="right")
    ax.set_xlabel("row width (hidden size)")
    ax.set_ylabel("ideal time (µs)")
    ax.set_title(f"{rows} rows, {traffic.dtype_name(dtype)}, at {bandwidth_GBps:,.0f} GB/s"
                 + (f" ({bandwidth_label})" if bandwidth_label else ""))
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.25)
    if own:
        fig.tight_layout()
    return fig


def estimate_html(e: traffic.Estimate) -> str:
    """An estimate as a small HTML table (the calculator's output), scrolling in page.table's box
    (with its scroll cue) where the column is too narrow."""
    from ..book.page import SCROLL_CLASS, SCROLL_STYLE

    rows = "".join(
        f"<tr><td>{escape(k.name)}</td><td>{k.bytes_read:,}</td><td>{k.bytes_written:,}</td>"
        f"<td>{k.flops:,}</td><td>{k.intensity:.3f}</td></tr>" for k in e.kernels)
    ideal = "-" if e.ideal_us is None else f"{e.ideal_us:,.3f} µs"
    return (f"<p><b>{escape(e.step)}</b>: {escape(e.description)}</p>"
            f'<div class="fusedrms-table"><div class="{SCROLL_CLASS}" style="{SCROLL_STYLE}">'
            f"<table><tr><th>kernel</th><th>read B</th><th>written B</th><th>FLOPs</th>"
            f"<th>flop/B</th></tr>{rows}"
            f"<tr><td><b>total</b></td><td>{e.bytes_read:,}</td><td>{e.bytes_written:,}</td>"
            f"<td>{e.flops:,}</td><td>{e.intensity:.3f}</td></tr></table></div></div>"
            f"<p>launches <b>{e.launches}</b> · row-trips <b>{float(e.row_trips):.3f}</b> · "
            f"ideal <b>{ideal}</b> at {e.bandwidth_GBps:,.0f} GB/s"
            + (f" · {e.bound}-bound" if e.bound else "") + "</p>")


def figure_html(fig: Figure, alt: str, dpi: int = 80) -> str:
    """A figure as an inline PNG ``<img>`` (an HTML widget can hold it; nothing is fetched)."""
    import base64
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (f'<img src="data:image/png;base64,{data}" alt="{escape(alt)}" '
            f'style="max-width:100%;height:auto">')


def calculator_plot(e: traffic.Estimate, bandwidth_label: str = "") -> Figure:
    """The estimate's design across the model widths, at its rows, dtype and bandwidth, with the
    chosen width marked."""
    widths = dict(MODEL_WIDTHS)
    if e.cols not in {c for c, _ in widths.values()}:
        widths["chosen"] = (e.cols, None)
    widths = dict(sorted(widths.items(), key=lambda item: item[1][0]))
    fig = time_by_width([e.step], e.rows, e.dtype, e.bandwidth_GBps, widths, bandwidth_label,
                        figsize=(6.4, 3.6))
    ax = fig.axes[0]
    ax.set_xscale("log")  # a chosen width far from the models' must not squash their ticks
    ax.set_yscale("log")
    ax.minorticks_off()
    cols = [c for c, _ in widths.values()]
    ax.set_xticks(cols)
    ax.set_xticklabels([f"{m} ({c})" for m, (c, _) in widths.items()], fontsize="small",
                       rotation=35, ha="right")
    ax.scatter([e.cols], [e.ideal_us], s=90, facecolors="none", edgecolors="black", zorder=4,
               label=f"{e.cols} cols: {e.ideal_us:,.3f} µs")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def calculator(bandwidth_GBps: float, peak_tflops: float | None = None,
               bandwidth_label: str = "", step: str = "fused_add_rmsnorm", rows: int = 4096,
               cols: int = 4096, dtype: str = "bf16"):
    """Design, rows, cols, dtype, bandwidth -> the design's table (bytes and FLOPs per kernel,
    launches, ideal µs) and its ideal time across model widths. Needs a live kernel to recompute;
    an impossible input (0 rows, a negative bandwidth) shows the model's message instead."""
    import ipywidgets as widgets

    w_step = widgets.Dropdown(options=list(traffic.STEPS), value=step, description="design")
    w_rows = widgets.IntText(value=rows, description="rows")
    w_cols = widgets.IntText(value=cols, description="cols")
    w_dtype = widgets.Dropdown(options=list(traffic.ACTIVATION_DTYPES), value=dtype,
                               description="dtype")
    w_bw = widgets.FloatText(value=bandwidth_GBps, description="GB/s")
    out = widgets.HTML()
    out.add_class("fusedrms-calculator-table")
    plot = widgets.HTML()
    plot.add_class("fusedrms-calculator-plot")
    note = widgets.HTML(f"<small>bandwidth: {escape(bandwidth_label)}</small>"
                        if bandwidth_label else "")

    latest = [0]

    def update(_change=None):
        # Table and plot change together, and only for the newest input: a kernel may run a
        # newer change while an older one is still drawing its figure.
        latest[0] += 1
        mine = latest[0]
        try:
            e = traffic.price(w_step.value, w_rows.value, w_cols.value, w_dtype.value,
                              w_bw.value, peak_tflops)
        except traffic.TrafficError as err:
            table_html = (f'<p class="fusedrms-input-error" style="color:#b35900">'
                          f"{escape(str(err))}</p>")
            plot_html = ""
        else:
            table_html = estimate_html(e)
            plot_html = figure_html(calculator_plot(e), f"ideal time of {e.step} by row width")
        if mine != latest[0]:
            return
        with out.hold_sync(), plot.hold_sync():
            out.value, plot.value = table_html, plot_html

    for w in (w_step, w_rows, w_cols, w_dtype, w_bw):
        w.observe(update, names="value")
    update()
    from .static import live_only, static_note

    # the static page greys the inputs out and says, under them, how to change them
    return widgets.VBox([live_only(widgets.HBox([w_step, w_dtype])),
                         live_only(widgets.HBox([w_rows, w_cols])),
                         widgets.HBox([live_only(w_bw), note]), static_note(), out, plot])
