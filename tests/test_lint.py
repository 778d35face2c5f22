"""Static checks of the sources: ruff over the package, the tests and the notebooks, and an API page that
documents every public name of ``mhsa``."""

import ast
import inspect
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mhsa

from paths import ROOT

API_PAGE = ROOT / "chapters" / "api.md"


def test_ruff_passes_on_the_package_tests_and_notebooks():
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.fail(f"ruff is not installed next to {sys.executable}; `make install` installs it")
    result = subprocess.run([str(ruff), "check", "mhsa", "tests", "chapters"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def taught_names() -> dict:
    """``{dotted name: object}`` of what readers use: ``mhsa.__all__`` and every function or
    class the chapters import from, or reach through, a module of ``mhsa`` (hidden answers
    aside). Found by parsing the chapters' code cells, so a chapter that starts using a name
    puts it on the API page's list."""
    taught = {f"mhsa.{n}": getattr(mhsa, n) for n in mhsa.__all__}
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            tree = ast.parse("".join(cell["source"]))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mhsa."):
                    dotted = [f"{node.module}.{alias.name}" for alias in node.names]
                elif isinstance(node, ast.Attribute):
                    dotted = [ast.unparse(node)]
                else:
                    continue
                for name in dotted:
                    if not name.startswith("mhsa.") or ".answers" in name:
                        continue
                    obj = resolve(name)
                    owner = resolve(name.rsplit(".", 1)[0])
                    if inspect.isclass(owner):
                        continue  # a method or attribute: documented with its class's :members:
                    if inspect.isfunction(obj) or inspect.isclass(obj):
                        taught[name] = obj
    for name in ALSO_TAUGHT:
        taught[name] = resolve(name)
    return taught


# Classes a chapter uses without naming them: what a taught function returns.
ALSO_TAUGHT = {
    "mhsa.models.pretrained.PretrainedEncoder": "load_minilm returns it; chapter 8 calls its methods",
    "mhsa.course.manual_text.ManualSplit": "python_manual returns it; chapter 12 reads its fields",
}


def resolve(dotted: str):
    """The object at ``dotted`` (modules, then attributes), or None."""
    try:
        return pkgutil.resolve_name(dotted)
    except (ImportError, AttributeError, ValueError):
        return None


def documented_names():
    """Names given to autodoc directives on the API page, by directive kind."""
    text = API_PAGE.read_text()
    return {kind: set(re.findall(rf"^\.\. auto{kind}:: (\S+)", text, flags=re.MULTILINE))
            for kind in ("module", "function", "class")}


def test_api_page_documents_every_taught_name():
    documented = documented_names()
    names = documented["function"] | documented["class"]
    missing = sorted(n for n in taught_names() if n not in names)
    assert not missing, f"add an autofunction or autoclass directive to {API_PAGE.name} for: {missing}"


def test_api_page_documents_only_taught_names():
    """Public means taught: plumbing (checks, mask combining, the fused call, packing) stays
    off the page, and no module is documented with ``:members:`` (which would pull it in)."""
    taught = taught_names()
    documented = documented_names()
    extra = sorted(n for n in documented["function"] | documented["class"] if n not in taught)
    assert not extra, f"{API_PAGE.name} documents names no reader is taught: {extra}"
    homes = {"mhsa"} | {obj.__module__ for obj in taught.values()}
    assert documented["module"] <= homes, documented["module"] - homes
    text = API_PAGE.read_text()
    assert not re.search(r"^\.\. automodule:: \S+\n(?:   :[^\n]*\n)*   :members:", text,
                         flags=re.MULTILINE)


def test_taught_names_are_found():
    """The parse finds both ways the chapters reach a helper (so the two tests above can fail)."""
    taught = taught_names()
    assert "mhsa.course.teaching.glue" in taught  # from mhsa.course.teaching import glue
    assert "mhsa.course.teaching.check" in taught  # mhsa.course.teaching.check(...)
    assert "mhsa.MultiHeadAttention" in taught and "mhsa.GroupedQueryAttention" in taught
    assert not any(".answers." in name for name in taught)
