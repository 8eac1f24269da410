"""What a chapter page shows: glued numbers, tables, one provenance badge, figures.

Every helper here renders the same way in live Jupyter and in the built book (plain HTML with
inline styles; the book's stylesheet only adds what a static page needs), and each has a
``text/plain`` form for terminals and nbval.

    from fusedrms.book import page
    page.glue("speedup", 2.43, ".2f")                # prose: {eval}`speedup` -> 2.43
    page.table(rows, columns=["kernel", "GB/s"], caption="Bandwidth", csv_name="bw.csv")
    page.chapter_badge("ch06")                       # once per chapter (from MANIFEST.json)
    fig, ax = page.figure(); ax.plot(...); page.show(fig, alt="bandwidth against size")
"""
from __future__ import annotations

import base64
import contextlib
import csv
import io
import math
import re
import urllib.parse
import warnings
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from ..viz.svg import COLUMN_PX, PHONE_COLUMN_PX, PHONE_MEDIA

GLUE_PREFIX = "application/papermill.record/"  # myst-nb's mime prefix for glued, hidden values

# Figures are drawn for the text column (viz.svg.COLUMN_PX) at 2x for high-DPI screens and shown
# at the column's width; a phone gets the same figure redrawn for its column (PHONE_COLUMN_PX).
FIGURE_DPI = 100      # 1 inch of figure = 100 CSS px on the page
HIDPI = 2             # the PNG carries 2 image pixels per CSS pixel
# A phone (a 390-px screen) gives the text column about PHONE_COLUMN_PX: figures are redrawn for it,
# shown below PHONE_MEDIA (the animations' phone layouts use the same breakpoint).
FULL_ROWS_LIMIT = 2000  # above this, the full data goes only into the CSV


# -- numbers in sentences ---------------------------------------------------------------------

def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 shape``, ``11 shapes``, ``1,024 rows``: a count in a sentence."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def median_with_spread(rec: dict) -> str:
    """A harness record's median with its run-to-run spread, ``"10.3 (10.1-10.6)"`` (µs): the
    p10-p90 of its process medians (min-max in recordings made before the p10-p90 was kept)."""
    lo, hi = rec.get("process_p10_us"), rec.get("process_p90_us")
    if lo is None or hi is None:
        lo, hi = rec.get("min_median_us"), rec.get("max_median_us")
    def us(v: float) -> str:  # three significant digits, never an exponent
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

    text = us(rec["median_us"])
    return text + (f" ({us(lo)}-{us(hi)})" if lo is not None and hi is not None else "")


def listed(items, word: str = "and", serial: bool = False) -> str:
    """``a``, ``a and b``, ``a, b and c`` (``word`` for "or"; ``serial``: ``a, b, and c``, for
    lists of clauses); empty items are left out."""
    items = [str(i) for i in items if i is not None and i != ""]
    if len(items) < 3:
        return f" {word} ".join(items)
    return ", ".join(items[:-1]) + ("," if serial else "") + f" {word} " + items[-1]


class GluedText(str):
    """A glued value's text. A notebook shows it as written, without quotes: ``{eval}`name```
    in JupyterLab (jupyterlab-myst) and in the built book (myst-nb) both display its text/plain."""

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))


def _bind_in_notebook(name: str, text: str) -> None:
    """``name = GluedText(text)`` in the running notebook, so the prose's ``{eval}`name``` reads
    it. A variable of the notebook's own code is left alone: chapters still on ``{glue:text}``
    reuse some names, and ``code/scripts/lab_ready.py`` refuses a chapter whose prose would read
    such a variable."""
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: there is no prose to read it
        return
    shell = get_ipython()
    if shell is None:
        return
    namespace = shell.user_ns
    if name not in namespace or isinstance(namespace[name], GluedText):
        namespace[name] = GluedText(text)


def glue(name: str, value: Any, fmt: str = "") -> None:
    """Store ``value`` (formatted with ``fmt``) for the prose; shows nothing on the page.

    In a markdown cell write ``{eval}`name```: JupyterLab (after the cell above has run) and the
    built book both put the formatted text there, because ``name`` becomes a variable of the
    notebook holding that text. Format here (``fmt``, e.g. ``".1f"``, ``",.0f"``). Returns None,
    so a cell that ends with it shows nothing.

    Chapters not yet converted by ``code/scripts/lab_ready.py`` still write ``{glue:text}`name```,
    which only the built book fills in: for them the value is also stored the way myst-nb's glue
    reads it.
    """
    from IPython.display import display

    if not name.isidentifier():
        raise ValueError(f"glue names must be identifiers (letters, digits, _): got {name!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"refusing to glue {name}={value}: a non-finite number in the prose "
                         "is a bug upstream")
    text = format(value, fmt) if fmt else str(value)
    _bind_in_notebook(name, text)
    # myst-nb reads text/plain back with ast.literal_eval: store a literal that gives exactly the
    # text ("4,417" unquoted would come back as the tuple (4, 417)), or the plain number.
    number = not fmt and isinstance(value, (int, float)) and not isinstance(value, bool)
    stored = repr(value) if number else repr(text)
    display({GLUE_PREFIX + "text/plain": stored}, raw=True,
            metadata={"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}})


# -- tables -----------------------------------------------------------------------------------

def _rows_and_columns(data, columns):
    """Rows (lists) and column names from a DataFrame, list of dicts, list of rows or dict of lists."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame
        cols = [str(c) for c in data.columns]
        return [list(r) for r in data.itertuples(index=False)], columns or cols
    if isinstance(data, Mapping):  # dict of columns
        cols = list(data)
        lengths = {len(data[c]) for c in cols}
        if len(lengths) > 1:
            raise ValueError(f"table: the columns have different lengths {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
        return [[data[c][i] for c in cols] for i in range(n)], columns or cols
    data = list(data)
    if data and isinstance(data[0], Mapping):
        cols = list(columns) if columns else list(dict.fromkeys(k for r in data for k in r))
        return [[r.get(c, "") for c in cols] for r in data], cols
    if columns is None:
        raise ValueError("table: rows given as lists need columns=[...] naming each column")
    for i, r in enumerate(data):
        if len(r) != len(columns):
            raise ValueError(f"table: row {i} has {len(r)} values for {len(columns)} columns")
    return [list(r) for r in data], list(columns)


def _cell_text(value, fmt) -> str:
    if value is None:
        return ""
    if callable(fmt):
        return str(fmt(value))
    if fmt:
        return format(value, fmt)
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return str(value)


# A dot or underscore inside a name, not inside a number ("16.8" stays whole).
_NAME_JOINT = re.compile(r"(?<=[A-Za-z0-9])([._])(?=[A-Za-z])")


def _breakable(text: str) -> str:
    """``text`` escaped, with a line-break opportunity after each dot and underscore inside a
    name: ``capstone.fused_residual_in_place`` may wrap in a narrow column instead of widening it."""
    return _NAME_JOINT.sub(r"\1<wbr>", escape(text))


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# A table wider than its box scrolls inside it. The box shows a shadow at each edge where columns
# are hidden (pure CSS: the covers scroll with the content, the shadows stay at the edges), so a
# reader on a phone sees that there is more to the side. Inline, so JupyterLab shows it too.
SCROLL_CLASS = "fusedrms-table-scroll"
_COVER = "var(--pst-color-background, var(--jp-layout-color0, #fff))"
_SHADOW = "var(--fusedrms-scroll-shadow, rgba(0, 0, 0, .28))"
_EDGE = "100% no-repeat"
SCROLL_STYLE = (
    "max-width:100%;overflow-x:auto;background:"
    f"linear-gradient(to right, {_COVER} 30%, transparent) left / 2.5em {_EDGE} local,"
    f"linear-gradient(to left, {_COVER} 30%, transparent) right / 2.5em {_EDGE} local,"
    f"radial-gradient(farthest-side at 0 50%, {_SHADOW}, transparent) left / .9em {_EDGE} scroll,"
    f"radial-gradient(farthest-side at 100% 50%, {_SHADOW}, transparent) right / .9em {_EDGE} scroll")
_SCROLL_BOX = f'<div class="{SCROLL_CLASS}" style="{SCROLL_STYLE}">'


class Table:
    """A rendered table: at most ``max_rows`` rows on the page, the rest one click away."""

    def __init__(self, data, columns=None, *, max_rows: int = 12, caption: str = "",
                 csv_name: str | None = None, formats: Mapping[str, Any] | None = None):
        if max_rows < 1:
            raise ValueError("table: max_rows must be at least 1")
        self.rows, given = _rows_and_columns(data, columns)
        self.columns = [str(c) for c in given]
        self.max_rows, self.caption, self.csv_name = max_rows, caption, csv_name
        unknown = set(formats or {}) - set(self.columns)
        if unknown:
            raise ValueError(f"table: formats for unknown columns {sorted(unknown)}; "
                             f"the columns are {self.columns}")
        self.formats = dict(formats or {})
        if csv_name is not None and not csv_name.endswith(".csv"):
            raise ValueError(f"table: csv_name must end in .csv, got {csv_name!r}")

    def _text_rows(self, rows):
        return [[_cell_text(v, self.formats.get(c)) for v, c in zip(r, self.columns)] for r in rows]

    def _numeric(self) -> list[bool]:
        return [all(_is_number(r[j]) or r[j] is None for r in self.rows) and bool(self.rows)
                for j in range(len(self.columns))]

    def _html_table(self, rows, caption: str) -> str:
        numeric = self._numeric()
        head = "".join(f'<th style="text-align:{"right" if n else "left"}">{_breakable(c)}</th>'
                       for c, n in zip(self.columns, numeric))
        body = "".join(
            "<tr>" + "".join(f'<td style="text-align:{"right" if n else "left"}">'
                             f"{escape(t) if n else _breakable(t)}</td>"
                             for t, n in zip(r, numeric)) + "</tr>"
            for r in self._text_rows(rows))
        label = f' aria-label="{escape(caption)}"' if caption else ""
        return (f'<table class="fusedrms-table-grid"{label}><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>")

    def csv_text(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows([["" if v is None else v for v in r] for r in self.rows])
        return out.getvalue()

    def _repr_html_(self) -> str:
        n = len(self.rows)
        shown = self.rows[:self.max_rows]
        # the caption stays outside the scrolling box: on a phone a wide table scrolls, its
        # caption wraps in the column
        cap = (f'<p class="fusedrms-table-caption">{escape(self.caption)}</p>'
               if self.caption else "")
        parts = ['<div class="fusedrms-table" style="max-width:100%">', cap,
                 _SCROLL_BOX, self._html_table(shown, self.caption), "</div>"]
        extra = []
        if n > self.max_rows:
            extra.append(f"{n - self.max_rows} more rows")
            if n <= FULL_ROWS_LIMIT:
                parts.append(f'<details class="fusedrms-table-all"><summary>All {n} rows</summary>'
                             f"{_SCROLL_BOX}"
                             f"{self._html_table(self.rows, '')}</div></details>")
        if self.csv_name:
            href = "data:text/csv;charset=utf-8," + urllib.parse.quote(self.csv_text())
            parts.append(f'<p class="fusedrms-table-csv"><a download="{escape(self.csv_name)}" '
                         f'href="{href}">Download the data ({escape(self.csv_name)}, {n} rows)</a>'
                         "</p>")
        parts.append("</div>")
        return "".join(parts)

    def __repr__(self) -> str:
        shown = self._text_rows(self.rows[:self.max_rows])
        widths = [max([len(c)] + [len(r[j]) for r in shown]) for j, c in enumerate(self.columns)]
        numeric = self._numeric()

        def line(cells):
            return "  ".join(t.rjust(w) if n else t.ljust(w)
                             for t, w, n in zip(cells, widths, numeric)).rstrip()
        lines = ([self.caption] if self.caption else []) + [line(self.columns)]
        lines += [line(r) for r in shown]
        if len(self.rows) > self.max_rows:
            lines.append(f"... {len(self.rows) - self.max_rows} more rows")
        return "\n".join(lines)


def table(data, columns: Sequence[str] | None = None, *, max_rows: int = 12, caption: str = "",
          csv_name: str | None = None, formats: Mapping[str, Any] | None = None) -> Table:
    """A table for the page: make it a cell's last expression (or ``display`` it).

    ``data``: a DataFrame, a list of dicts, a list of rows (then ``columns`` names them) or a
    dict of columns. ``formats`` maps a column to a format spec (``".1f"``) or a function.
    Rows past ``max_rows`` go into a collapsed "All N rows" dropdown; ``csv_name`` adds a link
    that downloads every row as CSV (the file is inside the page: it works offline).
    """
    return Table(data, columns, max_rows=max_rows, caption=caption, csv_name=csv_name,
                 formats=formats)


class Tables:
    """Several tables shown as one output (a wide table split by its columns)."""

    def __init__(self, *tables: Table):
        self.tables = tables

    def _repr_html_(self) -> str:
        return "".join(t._repr_html_() for t in self.tables)

    def __repr__(self) -> str:
        return "\n\n".join(repr(t) for t in self.tables)


# -- provenance -------------------------------------------------------------------------------

VERSION_KEYS = ("cuda", "hip", "torch", "triton", "python")


def _normalized(prov: Mapping) -> dict:
    """The badge's interface from either form: {gpu, driver, versions: {...}, date, commit,
    command?, stale?, own?} or a record file's flat provenance (cuda, torch, ... at the top)."""
    missing = [k for k in ("gpu", "date", "commit") if not prov.get(k)]
    if missing:
        raise ValueError(f"badge: the provenance lacks {missing}; a recorded result without "
                         "them cannot be shown")
    versions = dict(prov.get("versions") or {})
    for k in VERSION_KEYS:
        if prov.get(k) and k not in versions:
            versions[k] = prov[k]
    commit = prov["commit"]
    commits = [str(c) for c in commit] if isinstance(commit, (list, tuple)) else [str(commit)]
    return {"gpu": str(prov["gpu"]), "driver": prov.get("driver"), "date": str(prov["date"]),
            "commit": ", ".join(commits), "commit_short": ", ".join(c[:10] for c in commits),
            "command": prov.get("command"),
            "versions": {k: str(v) for k, v in versions.items() if v},
            "stale": prov.get("stale"), "own": bool(prov.get("own"))}


def _without_paths(command: str) -> str:
    """A command as the reader can repeat it: a recording's folder (``python -m fusedrms.record
    ... --out DIR``) dropped, as a reader's recording goes to its default folder; other absolute
    paths of the measuring machine shortened to their file names (``--out /tmp/r/grid.json`` ->
    ``--out grid.json``)."""
    if command.startswith("python -m fusedrms.record"):
        command = re.sub(r"\s--out[ =]\S+", "", command)
    return re.sub(r"(?<![\w.])/(?:[^\s/]+/)+([^\s/]*)", r"\1", command)


class Badge:
    def __init__(self, prov: Mapping):
        self.p = _normalized(prov)

    def summary(self) -> str:
        p = self.p
        who = "Your recording" if p["own"] else "Recorded"
        n = "commits" if "," in p["commit"] else "commit"
        return f"{who}: {p['gpu']}, {p['date'][:10]}, {n} {p['commit_short']}"

    def details(self) -> list[tuple[str, str]]:
        p = self.p
        rows = [("GPU", p["gpu"])]
        if p["driver"]:
            rows.append(("driver", str(p["driver"])))
        rows += [(k, v) for k, v in p["versions"].items()]
        rows += [("date", p["date"]), ("commit", p["commit"])]
        if p["command"]:
            rows.append(("command", _without_paths(str(p["command"]))))
        return rows

    def stale_line(self) -> str:
        note = self.p["stale"]
        if not note:
            return ""
        if isinstance(note, str) and note.startswith("These numbers"):
            return note  # a whole sentence already (records.Staleness.badge)
        return ("These numbers were measured on an earlier version of the kernel"
                + (f": {note}" if isinstance(note, str) else "."))

    def _repr_html_(self) -> str:
        dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in self.details())
        stale = self.stale_line()
        warn = (f'<p class="fusedrms-stale" style="margin:.3em 0 0;color:#92400e">'
                f"&#9888; {escape(stale)}</p>") if stale else ""
        return ('<div class="fusedrms-badge" data-fusedrms-badge="1" style="max-width:100%;'
                'border:1px solid #9ca3af;border-radius:6px;padding:.3em .6em;margin:.5em 0;'
                'font-size:.9em;overflow-wrap:anywhere">'
                f"<details><summary>{escape(self.summary())}</summary>"
                '<dl style="display:grid;grid-template-columns:max-content 1fr;gap:0 1em;'
                f'margin:.4em 0 0">{dl}</dl></details>{warn}</div>')

    def __repr__(self) -> str:
        return self.summary() + (f"\n{self.stale_line()}" if self.p["stale"] else "")


def badge(provenance: Mapping, *, stale: str | bool | None = None, own: bool | None = None) -> Badge:
    """The chapter's one provenance badge: GPU, date, commit; driver and versions unfold.

    ``provenance``: {gpu, driver, versions: {torch, triton, cuda, ...}, date, commit} plus
    optional ``command``, ``stale`` (a note: the numbers come from an earlier kernel) and
    ``own`` (True: the reader recorded them on their GPU). A record file's provenance works too.
    """
    if not isinstance(provenance, Mapping):
        raise TypeError("badge: pass the provenance as a dict (gpu, driver, versions, date, commit)")
    prov = dict(provenance)
    if stale is not None:
        prov["stale"] = stale
    if own is not None:
        prov["own"] = own
    return Badge(prov)


def chapter_badge(chapter: str, folder=None) -> Badge:
    """The badge for ``chapter``'s recorded results (``"ch06"``), from the recording's
    MANIFEST.json: the reader's own recording for their GPU when there is one, else the committed
    one (``folder`` overrides). Adds the staleness sentence when the kernel changed since."""
    from pathlib import Path

    from .. import records

    folder = Path(folder) if folder is not None else records.recording_dir(chapter=chapter)
    again = f"`python -m fusedrms.record --chapters {chapter.removeprefix('ch').lstrip('0')}`"
    manifest = records.read_manifest(folder)
    if manifest is None:
        raise FileNotFoundError(f"no {records.MANIFEST} in {folder}: record the chapter with "
                                f"{again}")
    entry = manifest.get("chapters", {}).get(chapter)
    if not entry:
        raise KeyError(f"{chapter} has no recorded results in {folder / records.MANIFEST}; record "
                       f"them with {again}")
    files = [manifest.get("files", {}).get(f) or {} for f in entry.get("files", [])]
    files = [f for f in files if f] or [{}]
    dates = sorted(entry.get("dates") or [f["date"] for f in files if f.get("date")])
    date = entry.get("started") or (dates[-1] if dates else manifest.get("started"))
    prov = {"gpu": manifest.get("gpu") or files[0].get("gpu"),
            "driver": manifest.get("driver") or files[0].get("driver"),
            "versions": manifest.get("versions") or files[0].get("versions") or {},
            "date": date, "commit": entry.get("commits") or entry.get("commit")
            or manifest.get("commit"),
            # the chapter's own command: a recording installed with chapters kept from another
            # names its own run at the top (a legacy entry has none: the top's then)
            "command": entry.get("command") or manifest.get("command")}
    own = records.own_recording_dir()
    prov["own"] = own is not None and Path(own).resolve() == folder.resolve()
    stale = records.staleness(chapter, folder).badge
    if entry.get("smoke"):
        stale = ("a smoke recording (minimal sizes and repetitions) that checks the pipeline; "
                 "its numbers are not measurements") + (f". {stale}" if stale else "")
    prov["stale"] = stale or None
    return Badge(prov)


# -- figures ----------------------------------------------------------------------------------

STYLE = {
    "figure.dpi": FIGURE_DPI, "savefig.dpi": FIGURE_DPI * HIDPI,
    "figure.facecolor": "white", "axes.facecolor": "white", "savefig.facecolor": "white",
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 9.5,
    "ytick.labelsize": 9.5, "legend.fontsize": 9.5, "legend.frameon": False,
    "axes.grid": True, "grid.color": "#d1d5db", "grid.linewidth": 0.6,
    "axes.spines.top": False, "axes.spines.right": False,
    "axes.edgecolor": "#374151", "text.color": "#111827", "axes.labelcolor": "#111827",
    "xtick.color": "#374151", "ytick.color": "#374151", "lines.linewidth": 1.6,
    "axes.prop_cycle": None,  # filled below (matplotlib's cycler)
}
# Colour-blind-safe (Okabe-Ito), dark enough on the white figure background in both themes.
COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]


def style() -> dict:
    """The book's matplotlib rcParams (:func:`figure` applies them to the whole notebook)."""
    from cycler import cycler

    return {**STYLE, "axes.prop_cycle": cycler(color=COLOURS)}


def use_style() -> None:
    """Apply the book's style to every later matplotlib figure of this kernel."""
    import matplotlib

    matplotlib.rcParams.update(style())


def figure(nrows: int = 1, ncols: int = 1, height: float | None = None, width_px: int = COLUMN_PX,
           **subplot_kw):
    """A figure drawn for the column: ``fig, ax = page.figure()``; show it with :func:`show`.

    ``height`` in inches (100 CSS px each; default keeps a 5:3 panel). Labels are 10 pt, i.e.
    about 14 px on the page, on a desktop and on a phone (:func:`show` redraws it for a phone). The figure is not a pyplot figure, so a cell
    never shows it twice.
    """
    from matplotlib.figure import Figure

    if width_px > COLUMN_PX:
        raise ValueError(f"figure: {width_px} px is wider than the column ({COLUMN_PX} px)")
    width = width_px / FIGURE_DPI
    height = height if height is not None else max(2.4, width * 0.6 * nrows / ncols ** 0.5)
    use_style()  # labels and lines drawn later read the rcParams when they are created
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=True, **subplot_kw)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI * HIDPI, metadata={"Software": None})
    return buf.getvalue()


def smallest_text_px(fig) -> float:
    """The smallest visible text of ``fig`` in CSS px at its drawn width (10 pt = 13.9 px)."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.figure is not None]
    return round(min(sizes, default=10) * FIGURE_DPI / 72, 1)


def _legends(fig):
    """(owner, legend) for every legend of ``fig``: figure legends and axes legends."""
    found = [(fig, leg) for leg in fig.legends]
    return found + [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]


def _fit_legend(fig, owner, legend, width_px: int):
    """A copy of ``legend`` with half its columns when it is nearly ``width_px`` wide, else None.
    (matplotlib cannot change a legend's columns in place; the caller puts the old one back.)"""
    from matplotlib.legend import Legend

    wide = legend.get_window_extent().width / fig.dpi * FIGURE_DPI  # in CSS px
    if legend._ncols < 2 or wide <= 0.9 * width_px:
        return None
    anchor = legend._bbox_to_anchor  # None, or the given box placed on the axes (or figure)
    fitted = Legend(owner, legend.legend_handles, [t.get_text() for t in legend.texts],
                    ncols=max(1, legend._ncols // 2), prop=legend.prop,
                    frameon=legend.get_frame_on(), bbox_to_anchor=getattr(anchor, "_bbox", anchor),
                    title=legend.get_title().get_text() or None)
    fitted._loc, fitted._outside_loc = legend._loc, legend._outside_loc  # "outside ..." kept
    return fitted


def _titles_and_labels(fig):
    texts = [t for t in (getattr(fig, "_suptitle", None), getattr(fig, "_supxlabel", None)) if t]
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
    return [t for t in texts if t.get_text()]


def _wrap_long_y_labels(fig, limit_px: float) -> tuple[list, float]:
    """Y tick labels wider than ``limit_px`` (a bar chart's long category names) wrap onto
    several lines; returns (axis, formatter) pairs to put back and the height in inches the
    extra lines need."""
    import textwrap

    from matplotlib.ticker import FuncFormatter

    changed, extra = [], 0.0
    for ax in fig.axes:
        labels = [t for t in ax.get_yticklabels() if t.get_text()]
        widest = max((t.get_window_extent().width / fig.dpi * FIGURE_DPI for t in labels),
                     default=0)
        if widest <= limit_px:
            continue
        per_char = widest / max(len(t.get_text()) for t in labels)
        chars = max(12, int(limit_px / per_char))
        lines = max(len(textwrap.wrap(t.get_text(), chars)) for t in labels)
        extra += (lines - 1) * len(labels) * 1.3 * labels[0].get_fontsize() / 72
        old = ax.yaxis.get_major_formatter()
        ax.yaxis.set_major_formatter(FuncFormatter(
            lambda v, pos, old=old, chars=chars: textwrap.fill(old(v, pos), chars)))
        changed.append((ax.yaxis, old))
    return changed, extra


def _turn_colliding_x_labels(fig) -> list:
    """X tick labels that overlap at the new width turn upright; returns (axes, rotation)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a collapse here is judged by show() on the real draw
        fig.draw_without_rendering()
    turned = []
    for ax in fig.axes:
        boxes = sorted((t.get_window_extent() for t in ax.get_xticklabels()
                        if t.get_visible() and t.get_text()), key=lambda b: b.x0)
        if any(a.x1 > b.x0 for a, b in zip(boxes, boxes[1:])):
            labels = ax.get_xticklabels()
            turned.append((ax, labels[0].get_rotation() if labels else 0))
            ax.tick_params(axis="x", labelrotation=90)
    return turned


@contextlib.contextmanager
def _redrawn_for(fig, width_px: int):
    """``fig`` temporarily redrawn ``width_px`` wide with its labels at the same size: a row of
    panels becomes a column, a legend wider than the figure gets fewer columns, long titles and
    y tick labels wrap, and x tick labels that would overlap turn upright."""
    from matplotlib.gridspec import GridSpec

    size = fig.get_size_inches().copy()
    axes = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    specs = [ax.get_subplotspec() for ax in axes]
    grids = {id(s.get_gridspec()) for s in specs}
    row = (len(grids) == 1 and specs and specs[0].get_gridspec().nrows == 1
           and specs[0].get_gridspec().ncols > 1)
    height = size[1]
    if row:  # side by side panels would each get a third of a phone: stack them
        ncols = specs[0].get_gridspec().ncols
        column = GridSpec(ncols, 1, figure=fig)
        for ax, spec in zip(axes, specs):
            ax.set_subplotspec(column[spec.colspan.start, 0])
        height = size[1] * (1 + 0.8 * (ncols - 1))
    swapped, wrapped, formatters, turned = [], [], [], []
    try:
        for owner, legend in _legends(fig):  # measured at the drawn size, before any squeeze
            fitted = _fit_legend(fig, owner, legend, width_px)
            if fitted is None:
                continue
            if owner is fig:
                fig.legends[fig.legends.index(legend)] = fitted
            else:
                owner.legend_ = fitted
            fitted.set_figure(fig)
            swapped.append((owner, legend, fitted))
        formatters, taller = _wrap_long_y_labels(fig, 0.4 * width_px)  # at the drawn size too
        fig.set_size_inches(width_px / FIGURE_DPI, height + taller)
        # titles and axis labels wider than the phone wrap instead of running off the figure
        for text in _titles_and_labels(fig):
            if not text.get_wrap():
                text.set_wrap(True)
                wrapped.append(text)
        turned = _turn_colliding_x_labels(fig)
        yield fig
    finally:
        for axis, formatter in formatters:
            axis.set_major_formatter(formatter)
        for ax, rotation in turned:
            ax.tick_params(axis="x", labelrotation=rotation)
        for text in wrapped:
            text.set_wrap(False)
        for owner, legend, fitted in swapped:
            if owner is fig:
                fig.legends[fig.legends.index(fitted)] = legend
            else:
                owner.legend_ = legend
        if row:
            for ax, spec in zip(axes, specs):
                ax.set_subplotspec(spec)
        fig.set_size_inches(*size)


def show(fig, alt: str):
    """Display ``fig`` at its drawn width (2x pixels for high-DPI screens); ``alt`` describes it.

    On a phone (``PHONE_MEDIA``) the page shows the same figure redrawn for the phone's column
    (``PHONE_COLUMN_PX``), so its labels keep their size there instead of shrinking to half.
    """
    from IPython.display import display

    if not alt or not alt.strip():
        raise ValueError("show: say in alt= what the figure shows (screen readers read it)")
    width_px = round(fig.get_figwidth() * FIGURE_DPI)
    desktop = _png(fig)
    text_px = smallest_text_px(fig)  # after drawing: tick labels exist only once drawn
    phone = ""
    if width_px > PHONE_COLUMN_PX:
        with _redrawn_for(fig, PHONE_COLUMN_PX), warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            small = _png(fig)
            height = round(fig.get_figheight() * FIGURE_DPI)
        # a figure whose decorations leave its axes no room on a phone keeps the desktop image
        if not any("collapsed" in str(w.message) for w in said):
            phone = (f'<source media="{PHONE_MEDIA}" srcset="{_data_uri(small)}" '
                     f'width="{PHONE_COLUMN_PX}" height="{height}">')
    height_px = round(fig.get_figheight() * FIGURE_DPI)
    img = (f'<img class="fusedrms-figure" src="{_data_uri(desktop)}" alt="{escape(alt)}" '
           f'width="{width_px}" height="{height_px}" data-text-px="{text_px:g}" '
           'style="max-width:100%;height:auto">')
    html = f"<picture>{phone}{img}</picture>" if phone else img
    display({"text/html": html, "text/plain": f"[figure: {alt}]"}, raw=True)


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()
