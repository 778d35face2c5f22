"""Static checks of the sources: ruff over the package, the tests and the notebooks, and an API page that
documents every public name of ``mhsa``."""

import importlib
import inspect
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


def public_modules():
    """Every public module of the package (``mhsa.course.answers`` holds data, not API)."""
    names = [m.name for m in pkgutil.iter_modules(mhsa.__path__) if not m.name.startswith("_")]
    return [importlib.import_module(f"mhsa.{name}") for name in names if name != "answers"]


def documented_names():
    """Names given to autodoc directives on the API page, and the modules documented with members."""
    text = API_PAGE.read_text()
    names = set(re.findall(r"^\.\. auto\w+:: (\S+)", text, flags=re.MULTILINE))
    with_members = set(re.findall(r"^\.\. automodule:: (\S+)\n(?:   :[^\n]*\n)*   :members:", text,
                                  flags=re.MULTILINE))
    return names, with_members


def test_api_page_documents_every_exported_name():
    names, _ = documented_names()
    exported = [n for n in mhsa.__all__ if not inspect.ismodule(getattr(mhsa, n))]
    missing = [f"mhsa.{n}" for n in exported if f"mhsa.{n}" not in names]
    assert not missing, f"add an autofunction or autoclass directive to {API_PAGE.name} for: {missing}"


@pytest.mark.parametrize("module", public_modules(), ids=lambda m: m.__name__)
def test_api_page_documents_every_public_module_and_its_functions(module):
    names, with_members = documented_names()
    assert module.__name__ in names, f"add '.. automodule:: {module.__name__}' to {API_PAGE.name}"
    if module.__name__ in with_members:
        return
    exported = {getattr(mhsa, n) for n in mhsa.__all__}
    own = [name for name, obj in vars(module).items()
           if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
           and obj.__module__ == module.__name__ and obj not in exported]
    missing = [f"{module.__name__}.{name}" for name in own if f"{module.__name__}.{name}" not in names]
    assert not missing, f"document these in {API_PAGE.name} (or give the automodule ':members:'): {missing}"
