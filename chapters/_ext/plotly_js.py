"""Sphinx extension: the book serves plotly.js itself, on the pages that show a head view.

``mhsa.course.plotting.head_view`` writes HTML that draws with the page's global ``Plotly`` and embeds no
JavaScript library (``include_plotlyjs=False`` in plotly's terms). This extension copies the
``plotly.min.js`` that ships inside the installed plotly package into the build's ``_static`` folder
and adds it, as a plain script in the page head, only to pages whose body holds a head view. No CDN:
the pages work offline and in the headless-browser test.
"""

import shutil
from pathlib import Path

from sphinx.errors import ExtensionError

FILE = "plotly.min.js"
MARKER = 'class="mhsa-head-view"'  # what mhsa.course.plotting.head_view writes around each view


def plotly_js() -> Path:
    """The plotly.min.js bundled with the installed plotly package."""
    try:
        import plotly
    except ImportError as error:
        raise ExtensionError('the head views need plotly: pip install "mhsa[viz]"') from error
    path = Path(plotly.__file__).parent / "package_data" / FILE
    if not path.is_file():
        raise ExtensionError(f"plotly {plotly.__version__} ships no {FILE} at {path.parent}")
    return path


def add_to_page(app, pagename, templatename, context, doctree):
    """Load plotly.js on this page only, before the body's scripts run (a plain, blocking script)."""
    if MARKER in context.get("body", ""):
        app.add_js_file(FILE)


def copy_to_static(app, exception):
    if exception is None and app.builder.format == "html":
        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plotly_js(), static / FILE)


def setup(app):
    plotly_js()  # fail early, with the install command, when plotly is missing
    app.connect("html-page-context", add_to_page)
    app.connect("build-finished", copy_to_static)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
