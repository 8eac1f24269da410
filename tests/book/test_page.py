"""fusedrms.book.page: glued numbers, tables, the provenance badge and figures."""
import base64
import csv
import io
import re
import urllib.parse
import xml.etree.ElementTree as ET

import pytest

from fusedrms.book import page

PROV = {"gpu": "NVIDIA H200", "driver": "580.95", "versions": {"torch": "2.11.0", "triton": "3.6.0"},
        "date": "2026-11-30T10:00:00+00:00", "commit": "0123456789abcdef", "command": "make bench"}


def _displayed(monkeypatch):
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, raw=False, metadata=None: shown.append((obj, metadata)))
    return shown


# -- glue -------------------------------------------------------------------------------------

def test_glue_stores_formatted_text_hidden_from_the_page(monkeypatch):
    shown = _displayed(monkeypatch)
    assert page.glue("speedup", 2.4321, ".2f") is None  # a cell ending with it shows nothing
    (bundle, meta), = shown
    assert bundle == {page.GLUE_PREFIX + "text/plain": "'2.43'"}  # no visible mime type
    assert meta == {"scrapbook": {"name": "speedup", "mime_prefix": page.GLUE_PREFIX}}
    from myst_nb.core.variables import format_plain_text  # what {glue:text} does with it

    def pasted(fmt_spec=""):
        return format_plain_text(shown[-1][0][page.GLUE_PREFIX + "text/plain"], fmt_spec)
    assert pasted() == "2.43"
    page.glue("gbps", 4417.2, ",.0f")
    assert pasted() == "4,417"  # not the tuple (4, 417)
    page.glue("kernel", "triton.row")
    assert pasted() == "triton.row"
    page.glue("ratio", 0.8567)
    assert pasted() == "0.8567" and pasted(".1%") == "85.7%"  # a plain number formats in prose


def test_glue_refuses_bad_names_and_non_finite_numbers(monkeypatch):
    _displayed(monkeypatch)
    with pytest.raises(ValueError, match="identifiers"):
        page.glue("not a name", 1)
    with pytest.raises(ValueError, match="non-finite"):
        page.glue("x", float("nan"))


def _notebook_namespace(monkeypatch, namespace: dict):
    import IPython

    class Shell:
        user_ns = namespace
    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell())
    return namespace


def test_glue_binds_the_text_the_prose_evals_in_the_notebook(monkeypatch):
    _displayed(monkeypatch)
    from IPython.core.formatters import PlainTextFormatter

    ns = _notebook_namespace(monkeypatch, {})
    page.glue("gbps", 4417.2, ",.0f")
    page.glue("kernel", "it's \"triton.row\"")
    page.glue("ratio", 0.8567)
    # {eval}`gbps` shows the kernel's text/plain: the text as written, no quotes, no tuple
    shown = {k: PlainTextFormatter()(v) for k, v in ns.items()}
    assert shown == {"gbps": "4,417", "kernel": "it's \"triton.row\"", "ratio": "0.8567"}
    page.glue("gbps", 12.0, ".1f")  # running the cell again rebinds it
    assert PlainTextFormatter()(ns["gbps"]) == "12.0"


def test_glue_never_overwrites_a_variable_of_the_notebook(monkeypatch):
    shown = _displayed(monkeypatch)
    ns = _notebook_namespace(monkeypatch, {"ridge": 42.0})
    page.glue("ridge", 1.5, ".1f")
    assert ns == {"ridge": 42.0}
    assert len(shown) == 1, "{glue:text}`ridge` still reads the glued text"


def test_glue_outside_a_notebook_binds_nothing(monkeypatch):
    _displayed(monkeypatch)
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert page.glue("speedup", 2.5, ".1f") is None


# -- table ------------------------------------------------------------------------------------

def _cells(html):
    return re.findall(r"<td[^>]*>(.*?)</td>", html)


def test_table_from_dicts_rows_and_columns_agree():
    rows = [{"kernel": "a", "GBps": 1234.5678}, {"kernel": "b<c", "GBps": 2.0}]
    from_dicts = page.table(rows, formats={"GBps": ".1f"})._repr_html_()
    from_rows = page.table([["a", 1234.5678], ["b<c", 2.0]], columns=["kernel", "GBps"],
                           formats={"GBps": ".1f"})._repr_html_()
    from_cols = page.table({"kernel": ["a", "b<c"], "GBps": [1234.5678, 2.0]},
                           formats={"GBps": ".1f"})._repr_html_()
    assert from_dicts == from_rows == from_cols
    assert _cells(from_dicts) == ["a", "1234.6", "b&lt;c", "2.0"]  # escaped, formatted
    assert 'text-align:right">1234.6' in from_dicts  # numbers align right


def test_long_names_in_text_cells_may_wrap_at_dots_and_underscores_but_numbers_stay_whole():
    html = page.table([["capstone.fused_residual", "16.8 (16.7-16.8)", 2.5]],
                      columns=["kernel", "µs", "x"])._repr_html_()
    assert _cells(html) == ["capstone.<wbr>fused_<wbr>residual", "16.8 (16.7-16.8)", "2.5"]
    named = page.table([[1]], columns=["F.rms_norm"])._repr_html_()
    assert ">F.<wbr>rms_<wbr>norm</th>" in named  # headers too


def test_long_table_shows_max_rows_and_keeps_every_row_in_a_dropdown_and_csv():
    rows = [{"n": i, "sq": i * i} for i in range(30)]
    t = page.table(rows, max_rows=12, caption="Squares", csv_name="squares.csv")
    html = t._repr_html_()
    shown, rest = html.split("<details", 1)
    assert len(_cells(shown)) == 24 and '<p class="fusedrms-table-caption">Squares</p>' in shown
    assert "All 30 rows" in rest and len(_cells(rest)) == 60
    href = re.search(r'href="data:text/csv;charset=utf-8,([^"]*)"', html).group(1)
    data = list(csv.reader(io.StringIO(urllib.parse.unquote(href))))
    assert data[0] == ["n", "sq"] and data[-1] == ["29", "841"] and len(data) == 31
    text = repr(t)
    assert text.splitlines()[0] == "Squares" and "18 more rows" in text
    assert len(text.splitlines()) == 1 + 1 + 12 + 1


def test_short_table_has_no_dropdown_and_scrolls_in_its_own_box():
    html = page.table([[1, 2]], columns=["a", "b"])._repr_html_()
    assert "<details" not in html and "download" not in html
    assert html.startswith('<div class="fusedrms-table"') and "overflow-x:auto" in html
    # the scroll box carries the edge-shadow cue (the page lint checks it on a phone)
    assert f'<div class="{page.SCROLL_CLASS}" style="{page.SCROLL_STYLE}">' in html
    assert "local," in page.SCROLL_STYLE and page.SCROLL_STYLE.endswith("scroll")


@pytest.mark.parametrize("kwargs, message", [
    (dict(data=[[1, 2]]), "columns="),
    (dict(data=[[1, 2]], columns=["a"]), "row 0 has 2 values"),
    (dict(data={"a": [1], "b": [1, 2]}), "different lengths"),
    (dict(data=[{"a": 1}], formats={"b": ".1f"}), "unknown columns"),
    (dict(data=[{"a": 1}], csv_name="a.txt"), "end in .csv"),
    (dict(data=[{"a": 1}], max_rows=0), "max_rows"),
])
def test_table_says_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        page.table(**kwargs)


def test_table_takes_a_dataframe_like_object():
    class Frame:  # the two attributes page.table uses from a pandas DataFrame
        columns = ["a", "b"]

        def to_dict(self):
            return {}

        def itertuples(self, index=False):
            return iter([(1, "x"), (2, "y")])

    assert _cells(page.table(Frame())._repr_html_()) == ["1", "x", "2", "y"]


# -- badge ------------------------------------------------------------------------------------

def test_badge_summary_details_and_no_warning_when_current():
    b = page.badge(PROV)
    html = b._repr_html_()
    assert b.summary() == "Recorded: NVIDIA H200, 2026-11-30, commit 0123456789"
    assert html.count('class="fusedrms-badge"') == 1 and "<details>" in html
    for value in ("580.95", "2.11.0", "3.6.0", "make bench", "0123456789abcdef"):
        assert value in html
    assert "fusedrms-stale" not in html and "earlier version" not in repr(b)
    ET.fromstring(html.replace("&#9888;", ""))  # well-formed markup


def test_badge_warns_when_measured_on_an_earlier_kernel_and_names_the_readers_own_recording():
    b = page.badge(PROV, stale="the kernel changed in commit 89abcdef", own=True)
    assert b.summary().startswith("Your recording: NVIDIA H200")
    assert "measured on an earlier version of the kernel: the kernel changed" in b._repr_html_()
    assert "earlier version" in repr(b)
    assert "earlier version of the kernel." in page.badge({**PROV, "stale": True}).stale_line()


def test_badge_accepts_a_record_files_flat_provenance():
    flat = {"gpu": "NVIDIA H200", "backend": "cuda", "driver": "580", "cuda": "13.0",
            "torch": "2.11.0", "triton": "3.6.0", "python": "3.12.3",
            "date": "2026-11-30T10:00:00+00:00", "commit": "abc", "command": "x"}
    details = dict(page.badge(flat).details())
    assert details["cuda"] == "13.0" and details["python"] == "3.12.3" and "backend" not in details


def test_badge_shortens_the_measuring_machines_paths_in_the_command():
    b = page.badge({**PROV, "command": "bench.py plan --out /tmp/res_c/grid.json -o=/x/y"})
    assert dict(b.details())["command"] == "bench.py plan --out grid.json -o=y"
    # the recording's folder is no part of what a reader types (theirs is the default one)
    b = page.badge({**PROV, "command": "python -m fusedrms.record --chapters 6,7 --out /tmp/tmp.U1wvsgt9l6"})
    assert dict(b.details())["command"] == "python -m fusedrms.record --chapters 6,7"
    b = page.badge({**PROV, "command": "python -m fusedrms.record --out=/tmp/tmp.ab12/ --smoke"})
    assert dict(b.details())["command"] == "python -m fusedrms.record --smoke"
    b = page.badge({**PROV, "command": "python -m fusedrms.record --chapters 2,3 --out /tmp/recB"})
    assert dict(b.details())["command"] == "python -m fusedrms.record --chapters 2,3"


def test_badge_refuses_provenance_without_gpu_date_or_commit():
    with pytest.raises(ValueError, match="commit"):
        page.badge({"gpu": "H200", "date": "2026-11-30"})
    with pytest.raises(TypeError):
        page.badge("H200")


# -- figures ----------------------------------------------------------------------------------

def _pngs(html):
    """(source or img, width in image pixels) for every PNG in ``html``, in order."""
    found = re.findall(r'<(source|img)[^>]*?(?:srcset|src)="data:image/png;base64,([^"]+)"', html)
    return [(tag, int.from_bytes(base64.b64decode(data)[16:20], "big")) for tag, data in found]


def test_figure_is_drawn_for_the_column_at_twice_the_pixels_and_again_for_a_phone(monkeypatch):
    shown = _displayed(monkeypatch)
    fig, ax = page.figure()
    ax.plot([1, 2, 3], [3, 1, 2])
    ax.set_xlabel("rows")
    assert ax.xaxis.label.get_fontsize() >= 10  # >= 10 pt = 14 px at the column's width
    page.show(fig, alt="a test line")
    (bundle, _), = shown
    html = bundle["text/html"]
    assert html.startswith("<picture>") and html.count("<img") == 1 and html.count("<source") == 1
    img = re.search(r"<img[^>]*>", html).group(0)
    assert f'width="{page.COLUMN_PX}"' in img and 'alt="a test line"' in img
    assert f'media="{page.PHONE_MEDIA}"' in html and f'width="{page.PHONE_COLUMN_PX}"' in html
    # the phone version is drawn at the phone column's width: its labels keep their size there
    assert _pngs(html) == [("source", page.PHONE_COLUMN_PX * page.HIDPI),
                           ("img", page.COLUMN_PX * page.HIDPI)]
    assert 'data-text-px="13.2"' in img  # the 9.5 pt tick labels, in CSS px
    assert bundle["text/plain"] == "[figure: a test line]"
    assert round(fig.get_figwidth() * page.FIGURE_DPI) == page.COLUMN_PX  # put back as drawn


def test_a_figure_for_a_phone_stacks_a_row_of_panels_and_narrows_a_wide_legend(monkeypatch):
    shown = _displayed(monkeypatch)
    fig, (left, right) = page.figure(1, 2, height=2.8)
    for n in range(4):
        left.plot([0, 1], [n, n], label=f"a long label {n}")
    right.plot([0, 1], [1, 0])
    legend = left.legend(ncols=4, loc="lower left", bbox_to_anchor=(0, 1))
    with page._redrawn_for(fig, page.PHONE_COLUMN_PX):
        assert [ax.get_subplotspec().rowspan.start for ax in (left, right)] == [0, 1]
        assert left.get_legend()._ncols == 2 and fig.get_figheight() > 2.8
        fig.draw_without_rendering()
        for ax in (left, right):  # both panels keep a usable plot area
            assert ax.get_position().width * fig.get_figwidth() * page.FIGURE_DPI > 200
    assert left.get_legend() is legend and right.get_subplotspec().colspan.start == 1
    assert tuple(fig.get_size_inches()) == (page.COLUMN_PX / page.FIGURE_DPI, 2.8)
    page.show(fig, alt="two panels")
    (bundle, _), = shown
    assert 'height="504"' in bundle["text/html"]  # the stacked phone version is taller


def test_a_figure_for_a_phone_wraps_long_category_names_and_turns_crowded_x_labels():
    fig, (bars, groups) = page.figure(2, 1, height=5)
    names = [f"two passes, {n}-column chunks, 16 warps" for n in (1024, 2048, 4096)]
    bars.barh(range(3), [1, 2, 3])
    bars.set_yticks(range(3), names)
    groups.bar(range(6), [1] * 6)
    groups.set_xticks(range(6), [f"16384x8192\nbfloat16\n{i}" for i in range(6)])
    fig.draw_without_rendering()
    with page._redrawn_for(fig, page.PHONE_COLUMN_PX):
        fig.draw_without_rendering()
        wrapped = [t.get_text() for t in bars.get_yticklabels()]
        assert all("\n" in t for t in wrapped) and fig.get_figheight() > 5  # room for the lines
        assert groups.get_xticklabels()[0].get_rotation() == 90
    fig.draw_without_rendering()
    assert [t.get_text() for t in bars.get_yticklabels()] == names  # put back
    assert groups.get_xticklabels()[0].get_rotation() == 0


def test_a_figure_that_cannot_fit_a_phone_keeps_the_desktop_image_and_warns_nobody(monkeypatch):
    shown = _displayed(monkeypatch)
    fig, ax = page.figure()
    ax.set_ylabel("\n".join("tall label" for _ in range(30)))  # no room left for the axes
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would print on the page
        page.show(fig, alt="crowded")
    html = shown[0][0]["text/html"]
    assert html.startswith("<img") and "<source" not in html


def test_a_figure_no_wider_than_a_phone_is_shown_once(monkeypatch):
    shown = _displayed(monkeypatch)
    fig, ax = page.figure(width_px=page.PHONE_COLUMN_PX)
    page.show(fig, alt="small")
    html = shown[0][0]["text/html"]
    assert html.startswith("<img") and "<source" not in html


def test_figure_needs_alt_text_and_fits_the_column(monkeypatch):
    _displayed(monkeypatch)
    fig, _ = page.figure(1, 2, height=2.5)
    with pytest.raises(ValueError, match="alt="):
        page.show(fig, alt=" ")
    with pytest.raises(ValueError, match="wider than the column"):
        page.figure(width_px=page.COLUMN_PX + 1)


# -- the badge from a recording's manifest ----------------------------------------------------

def test_chapter_badge_reads_the_committed_manifest_and_says_when_it_is_stale():
    from fusedrms import records

    b = page.chapter_badge("ch06")
    assert b.summary().startswith("Recorded: NVIDIA H200, 2026-")
    if records.staleness("ch06").state == "current":
        assert b.stale_line() == ""
    else:
        assert b.stale_line().startswith("These numbers were measured ")
        assert records.staleness("ch06").badge in b.stale_line()
        assert b.stale_line().count("These numbers") == 1  # the sentence is not wrapped twice


def _manifest(folder, smoke=False):
    from fusedrms import records

    records.write_manifest(folder, {
        "format": 1, "commit": "feedc0de" * 5, "gpu": "NVIDIA H100", "driver": "590.1",
        "versions": {"cuda": "13.0", "torch": "2.11.0"}, "command": "python -m fusedrms.record ch07",
        "chapters": {"ch07": {"status": "ok", "started": "2026-12-01T08:00:00+00:00",
                              "commit": "feedc0de" * 5, "smoke": smoke, "sources": {}}},
        "files": {}, "stale": {}})


def test_chapter_badge_for_the_readers_own_current_recording(tmp_path, monkeypatch):
    from fusedrms import records

    _manifest(tmp_path)
    monkeypatch.setattr(records, "own_recording_dir", lambda gpu_name=None: tmp_path)
    monkeypatch.setattr(records, "staleness",
                        lambda chapter, folder=None: records.Staleness(chapter, "current"))
    b = page.chapter_badge("ch07", tmp_path)
    assert b.summary() == "Your recording: NVIDIA H100, 2026-12-01, commit feedc0defe"
    assert b.stale_line() == "" and ("command", "python -m fusedrms.record ch07") in b.details()
    assert ("driver", "590.1") in b.details() and ("torch", "2.11.0") in b.details()


def test_chapter_badge_names_the_chapters_own_command(tmp_path, monkeypatch):
    """A chapter kept from another run (install_recording --keep) shows that run's command, not
    the newest one's at the manifest's top; a legacy entry without one shows the top's."""
    from fusedrms import records

    _manifest(tmp_path)
    manifest = records.read_manifest(tmp_path)
    manifest["chapters"]["ch05"] = dict(manifest["chapters"]["ch07"],
                                        command="python -m fusedrms.record --chapters 5")
    records.write_manifest(tmp_path, manifest)
    monkeypatch.setattr(records, "staleness",
                        lambda chapter, folder=None: records.Staleness(chapter, "current"))
    assert ("command", "python -m fusedrms.record --chapters 5") in \
        page.chapter_badge("ch05", tmp_path).details()
    assert ("command", "python -m fusedrms.record ch07") in \
        page.chapter_badge("ch07", tmp_path).details()


def test_chapter_badge_marks_a_smoke_recording_and_names_missing_chapters(tmp_path):
    _manifest(tmp_path, smoke=True)
    assert "smoke recording" in page.chapter_badge("ch07", tmp_path).stale_line()
    with pytest.raises(KeyError, match="python -m fusedrms.record --chapters 3`"):
        page.chapter_badge("ch03", tmp_path)
    with pytest.raises(FileNotFoundError, match="MANIFEST.json"):
        page.chapter_badge("ch07", tmp_path / "nowhere")


def test_chapter_badge_falls_back_to_the_committed_recording_for_a_chapter_not_recorded(
        tmp_path, monkeypatch):
    from fusedrms import records

    _manifest(tmp_path)  # the reader recorded chapter 7 only
    monkeypatch.setattr(records, "own_recording_dir", lambda gpu_name=None: tmp_path)
    assert page.chapter_badge("ch06").summary().startswith("Recorded: NVIDIA H200, 2026-")
    assert page.chapter_badge("ch07").summary().startswith("Your recording: NVIDIA H100")


def test_counts_and_lists_in_sentences():
    assert page.counted(1, "shape") == "1 shape" and page.counted(11, "shape") == "11 shapes"
    assert page.counted(1024, "row") == "1,024 rows" and page.counted(0, "case") == "0 cases"
    assert page.counted(2, "process", "processes") == "2 processes"
    assert page.listed([]) == "" and page.listed(["a"]) == "a"
    assert page.listed(["a", "b"]) == "a and b" and page.listed(["a", "", None, "b", "c"]) == \
        "a, b and c"
    assert page.listed(["x", "y", "z"], "or") == "x, y or z"
    assert page.listed(["a", "b", "c"], serial=True) == "a, b, and c"


def test_a_median_with_its_spread_reads_without_exponents():
    from fusedrms.book import page as P

    assert P.median_with_spread({"median_us": 1190.4, "process_p10_us": 1180.0,
                                 "process_p90_us": 1194.0}) == "1,190 (1,180-1,194)"
    assert P.median_with_spread({"median_us": 7.171, "min_median_us": 7.1,
                                 "max_median_us": 7.18}) == "7.17 (7.10-7.18)"
    assert P.median_with_spread({"median_us": 42.0}) == "42.0"
