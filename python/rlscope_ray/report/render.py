"""The report page as HTML: the page model (model.py) through the package's
Jinja2 templates, with autoescaping on, and its static CSS and JavaScript
inlined, so that the page stays one self-contained file."""
from __future__ import annotations

import functools
from pathlib import Path

import jinja2
from markupsafe import Markup

from .page import Page

_HERE = Path(__file__).resolve().parent


def _static(name: str) -> Markup:
    """static/<name>, inlined as it is: it is the package's text, not the data's."""
    text = (_HERE / "static" / name).read_text(encoding="utf-8")
    if "</" in text:  # a <style> or <script> element ends at the first "</" of its closing tag
        raise RuntimeError(f"{_HERE / 'static' / name}: contains '</', which would end its element in the page")
    return Markup(text)


@functools.lru_cache(maxsize=None)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    # tojson (the charts' data): compact, in the model's order; the model keeps every number finite.
    env.policies["json.dumps_kwargs"] = {"separators": (",", ":"), "allow_nan": False}
    return env


def render(page: Page) -> str:
    return _environment().get_template("page.html").render(
        page=page, css=_static("report.css"), show_errors_js=_static("show_errors.js"),
        report_js=_static("report.js"))
