"""The book's own Sphinx glue (listed in _config.yml under sphinx.local_extensions).

Jupyter Book 1 registers sphinx-thebe's and sphinx-togglebutton's inline scripts twice, so every
page declared `const THEBE_JS_URL` twice and the browser logged a SyntaxError. Each page now gets
each script once; thebe itself stays off (launch_buttons.thebe: false), so its loader is dropped.

The theme (pydata-sphinx-theme, "[PST]: ...") and sphinx-togglebutton ("[togglebutton]: ...")
also log progress notes with console.log on every page; a small first script drops exactly those
notes, so a reader's console shows only what the book itself has to say (nothing, when it works).
"""
from __future__ import annotations

from pathlib import Path


def _key(script) -> tuple:
    attrs = getattr(script, "attributes", {}) or {}
    return (getattr(script, "filename", str(script)), tuple(sorted(attrs.items())))


def _is_thebe(script) -> bool:
    attrs = getattr(script, "attributes", {}) or {}
    name = str(getattr(script, "filename", "") or "")
    return "THEBE_JS_URL" in str(attrs.get("body", "")) or name.endswith("sphinx-thebe.js")


def _clean_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        key = _key(script)
        if key in seen or _is_thebe(script):
            continue
        seen.add(key)
        kept.append(script)
    context["script_files"] = kept


QUIET_THEME_NOTES = """(function () {
  var log = console.log.bind(console);
  console.log = function (first) {
    if (typeof first === "string" && /^\\[(PST|togglebutton)\\]/.test(first)) return;
    return log.apply(null, arguments);
  };
})();"""


def _icon_on_the_redirect(app, exception):
    """The site's index.html is a one-line redirect (sphinx-external-toc writes it): without an
    icon link there, the browser asks for /favicon.ico and logs a 404 before it moves on."""
    index = Path(app.outdir) / "index.html"
    favicon = app.config.html_favicon
    if exception is not None or not favicon or not index.is_file():
        return
    text = index.read_text(encoding="utf8")
    if text.startswith("<meta http-equiv=\"Refresh\"") and 'rel="icon"' not in text:
        icon = f'<link rel="icon" href="_static/{Path(favicon).name}" />\n'
        index.write_text(icon + text, encoding="utf8")


def setup(app):
    app.add_js_file(None, body=QUIET_THEME_NOTES, priority=1)  # before the theme's scripts
    app.connect("html-page-context", _clean_scripts, priority=900)
    app.connect("build-finished", _icon_on_the_redirect, priority=900)  # after the redirect
    return {"parallel_read_safe": True, "parallel_write_safe": True}
