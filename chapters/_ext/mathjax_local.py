"""Sphinx extension: the book serves MathJax itself, so a reader offline sees formulas, not TeX.

Sphinx loads MathJax 3 from a CDN unless ``mathjax_path`` names a file of the book. _config.yml
sets ``mathjax_path: mathjax/tex-mml-chtml.js``, a path Sphinx reads relative to the build's
``_static`` folder; this extension copies MathJax's browser distribution (its ``es5`` folder,
the same files the CDN serves) there. The files come from the ``django-static-mathjax`` wheel,
a plain copy of MathJax 3.2.2 that needs no Django (the ``dev`` extra installs it), so the build
downloads nothing. tests/book/test_browser.py checks that every page loads it from the book.
"""

import importlib.util
import shutil
from pathlib import Path

from sphinx.errors import ExtensionError

FOLDER = "mathjax"  # under the build's _static: _static/mathjax/tex-mml-chtml.js and the rest
PACKAGE = "django-static-mathjax"  # the wheel; it installs the module ``mathjax``


def mathjax_es5() -> Path:
    """The ``es5`` folder of the installed MathJax 3 copy."""
    spec = importlib.util.find_spec("mathjax")
    folder = Path(spec.origin).parent / "static" / "mathjax" / "es5" if spec and spec.origin else None
    if folder is None or not (folder / "tex-mml-chtml.js").is_file():
        raise ExtensionError(f'MathJax for the book comes from {PACKAGE}: pip install "mhsa[dev]"')
    return folder


def check_path(app, config):
    """The configured ``mathjax_path`` must be a file of this copy, never a URL."""
    path = config.mathjax_path
    if "://" in path or not path.startswith(f"{FOLDER}/"):
        raise ExtensionError(f"mathjax_path must be {FOLDER}/<file> (served by the book), got {path!r}")
    if not (mathjax_es5() / path.removeprefix(f"{FOLDER}/")).is_file():
        raise ExtensionError(f"mathjax_path {path!r}: no such file in {mathjax_es5()}")


def copy_to_static(app, exception):
    if exception is None and app.builder.format == "html":
        shutil.copytree(mathjax_es5(), Path(app.outdir) / "_static" / FOLDER, dirs_exist_ok=True)


def setup(app):
    mathjax_es5()  # fail early, with the install command, when the copy is missing
    app.connect("config-inited", check_path)
    app.connect("build-finished", copy_to_static)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
