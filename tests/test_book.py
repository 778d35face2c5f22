"""The book: notebook hygiene, and the strict Jupyter Book build.

The build runs ``jupyter-book build . -n -W --keep-going``: any Sphinx warning, a broken
reference, or a notebook that raises or times out makes it exit non-zero.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))


def toc_files():
    files = [TOC["root"]]
    for part in TOC.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def code_cells(path):
    cells = json.loads(path.read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code"]


def test_every_notebook_is_in_the_table_of_contents():
    listed = {f for f in toc_files()}
    assert {f"chapters/{nb.stem}" for nb in NOTEBOOKS} <= listed


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_installs_mhsa_from_the_configured_repository(path):
    first = code_cells(path)[0]
    source = "".join(first["source"])
    assert 'find_spec("mhsa") is None' in source
    url = re.escape(CONFIG["repository"]["url"])
    assert re.search(rf'"mhsa(\[\w+\])? @ git\+{url}"', source), "install line or URL differs"
    assert "remove-cell" in first["metadata"].get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_executed_in_order_without_errors(path):
    notebook = json.loads(path.read_text())
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    cells = [c for c in code_cells(path) if "".join(c["source"]).strip()]
    assert [c["execution_count"] for c in cells] == list(range(1, len(cells) + 1))
    for cell in cells:
        for output in cell["outputs"]:
            if output["output_type"] == "error":
                assert "NBVAL_RAISES_EXCEPTION" in "".join(cell["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_ends_with_three_exercises_with_hidden_solutions(path):
    text = "".join(
        "".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"
    )
    assert "## Exercises" in text
    exercises = re.findall(r":::\{exercise\}\s*\n:label: (\S+)", text)
    assert len(exercises) >= 3
    for label in exercises:
        assert re.search(rf":::\{{solution\}} {re.escape(label)}\s*\n:class: dropdown", text), label


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_has_alt_text(path):
    # MyST-NB puts cell metadata {"mystnb": {"image": {"alt": ...}}} on the figure's <img>
    for cell in code_cells(path):
        if any("image/png" in output.get("data", {}) for output in cell["outputs"]):
            alt = cell["metadata"].get("mystnb", {}).get("image", {}).get("alt", "")
            source = "".join(cell["source"])
            assert len(alt) >= 40, f"figure without alt text, cell starting {source[:60]!r}"


@pytest.mark.book
def test_strict_book_build_succeeds_with_executed_outputs():
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [str(jupyter_book), "build", str(ROOT), "-n", "-W", "--keep-going"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1500, check=False)
    problems = [line for line in (result.stdout + result.stderr).splitlines()
                if re.search(r"WARNING|ERROR|Error|Traceback", line)]
    assert result.returncode == 0, "\n".join(problems[-40:]) or result.stderr[-4000:]
    html = ROOT / "_build" / "html"
    for path in NOTEBOOKS:
        page = (html / "chapters" / f"{path.stem}.html").read_text()
        assert "cell_output" in page, f"{path.name} was rendered without outputs"
