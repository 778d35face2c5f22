"""The book: notebook hygiene, and the strict Jupyter Book build.

The build runs ``jupyter-book build . -n -W --keep-going``: any Sphinx warning or broken
reference makes it exit non-zero. It renders the outputs stored in the notebooks without
executing them again: nbval (the chapters/ part of ``make test``) has just re-run every chapter
and compared each stored output, so the stored outputs are the fresh ones.
"""

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mhsa.course.teaching import rounded_as_shown

from paths import ROOT

_spec = importlib.util.spec_from_file_location("install_cell", ROOT / ".ci" / "install_cell.py")
install_cell = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_cell)
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
IGNORE_TAG = "nbval-ignore-output"  # nbval does not compare this cell's outputs


def toc_files():
    files = [TOC["root"]]
    for part in TOC.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def code_cells(path):
    cells = json.loads(path.read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code"]


def test_every_notebook_is_in_the_table_of_contents():
    listed = set(toc_files())
    assert {f"chapters/{nb.stem}" for nb in NOTEBOOKS} <= listed


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_installs_mhsa_from_the_configured_repository(path):
    cells = json.loads(path.read_text())["cells"]
    first = cells[0]
    assert first["cell_type"] == "code" and "remove-cell" in first["metadata"].get("tags", [])
    source = "".join(first["source"])
    assert source == install_cell.install_cell(cells), "run: python .ci/install_cell.py"
    default = re.search(r'os\.environ\.get\(\s*"MHSA_INSTALL_SOURCE",\s*"([^"]+)"\)', source)
    assert default and default[1] == "git+" + CONFIG["repository"]["url"]


def test_every_extra_a_first_cell_installs_exists():
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = {extra for _, extra in install_cell.EXTRAS.values() if extra}
    for extra in extras:
        assert re.search(rf"^{extra} = \[", pyproject, flags=re.MULTILINE), extra


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_executed_in_order_without_errors(path):
    notebook = json.loads(path.read_text())
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    cells = [c for c in code_cells(path) if "".join(c["source"]).strip()]
    assert [c["execution_count"] for c in cells] == list(range(1, len(cells) + 1))
    for cell in cells:
        for output in cell["outputs"]:
            if output["output_type"] == "error":
                assert "raises-exception" in cell["metadata"].get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_printed_stream_is_stored_in_one_piece(path):
    """The kernel flushes a long print in pieces; stored as they came, the book breaks the
    line where a piece ends. ``.ci/execute_notebooks.py`` joins them."""
    split = [f"cell {k}: {a['name']} in pieces, one ending {''.join(a['text'])[-30:]!r}"
             for k, cell in enumerate(code_cells(path))
             for a, b in zip(cell["outputs"], cell["outputs"][1:])
             if a["output_type"] == b["output_type"] == "stream" and a["name"] == b["name"]]
    assert not split, "run .ci/execute_notebooks.py on it:\n" + "\n".join(split)


CODE_COLUMN = 88  # characters a code line may take: the book's code column, and Colab's


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_code_line_fits_the_books_code_column(path):
    """No line of any code cell, the hidden install cell included, is longer than the code
    column: a longer line makes the reader scroll sideways, on a phone even for short ones."""
    too_long = [f"cell {k}, line {n}: {len(line)} characters: {line[:60]!r}..."
                for k, cell in enumerate(json.loads(path.read_text())["cells"])
                if cell["cell_type"] == "code"
                for n, line in enumerate("".join(cell["source"]).splitlines(), start=1)
                if len(line) > CODE_COLUMN]
    assert not too_long, f"lines longer than {CODE_COLUMN} characters:\n" + "\n".join(too_long)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_nbval_comment_marker_is_left_in_the_code(path):
    """An exemption from nbval's comparison is a cell tag, never a comment the reader sees."""
    for cell in code_cells(path):
        for line in "".join(cell["source"]).splitlines():
            assert not re.match(r"\s*#\s*NBVAL_", line), line


def has_assertion(source: str) -> bool:
    """Whether code asserts something: an ``assert`` statement or an ``assert_*`` call."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name.startswith("assert_"):
                return True
    return False


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exempt_output_has_its_reason_and_sits_beside_an_assertion(path):
    """A cell whose output nbval does not compare (timings, digits of a training run) says why
    in its metadata, and it or the next code cell asserts what the text claims about it."""
    cells = [c for c in code_cells(path) if "".join(c["source"]).strip()]
    for k, cell in enumerate(cells):
        if IGNORE_TAG not in cell["metadata"].get("tags", []):
            continue
        source = "".join(cell["source"])
        reason = cell["metadata"].get("nbval", {}).get("ignore_output_reason", "")
        assert len(reason) >= 30, f"no reason for the exemption of the cell starting {source[:60]!r}"
        following = "".join(cells[k + 1]["source"]) if k + 1 < len(cells) else ""
        assert has_assertion(source) or has_assertion(following), (
            f"exempt output without an assertion beside it: {source[:60]!r}")


def glued_values(path) -> dict:
    """The values a notebook's cells glued, as stored: ``{name: value}``."""
    values = {}
    for cell in code_cells(path):
        for output in cell["outputs"]:
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            text = output.get("data", {}).get("application/papermill.record/text/plain")
            if name and text is not None:
                try:
                    values[name] = ast.literal_eval(text)
                except (SyntaxError, ValueError):
                    values[name] = text
    return values


GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)(?::([^`]*))?`")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_glued_float_is_stored_at_the_precision_the_text_shows(path):
    """Digits the text does not show are not stored: they would change with the CPU, and
    nbval compares stored outputs strictly (``mhsa.course.teaching.glue``'s ``fmt``)."""
    values = glued_values(path)
    text = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                     if c["cell_type"] == "markdown")
    for name, fmt in GLUE_ROLE.findall(text):
        assert name in values, f"the text inserts {name!r}, which no cell glues"
        value = values[name]
        if isinstance(value, float):
            assert fmt and fmt[-1] in "eEfFgG%", f"float {name!r} shown without a float format"
            assert rounded_as_shown(value, fmt) == value, (
                f"{name!r} is stored as {value!r}, with more digits than {fmt!r} shows")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_ends_with_three_exercises_with_hidden_solutions(path):
    text = "".join(
        "".join(c["source"]) for c in json.loads(path.read_text())["cells"]
        if c["cell_type"] == "markdown"
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


def test_mathjax_comes_from_the_book_not_a_cdn():
    """_config.yml points MathJax at a file that chapters/_ext/mathjax_local.py copies into the build;
    test_browser.py's ``test_mathjax_is_served_by_the_book`` checks the built pages."""
    sphinx = CONFIG["sphinx"]
    path = sphinx["config"]["mathjax_path"]
    assert "://" not in path and not path.startswith("//"), f"MathJax from a CDN: {path}"
    folder = ROOT / sphinx["local_extensions"]["mathjax_local"]
    spec = importlib.util.spec_from_file_location("mathjax_local", folder / "mathjax_local.py")
    extension = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extension)
    assert path.startswith(f"{extension.FOLDER}/")
    assert (extension.mathjax_es5() / path.removeprefix(f"{extension.FOLDER}/")).is_file()


def config_rendering_stored_outputs(folder: Path) -> Path:
    """_config.yml with execution off, written to ``folder``; paths made absolute to stay valid."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "off"
    extensions = config["sphinx"].get("local_extensions", {})
    for name, relative in extensions.items():
        extensions[name] = str(ROOT / relative)
    path = folder / "_config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.mark.book
def test_strict_book_build_succeeds_with_stored_outputs(tmp_path):
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [str(jupyter_book), "build", str(ROOT), "-n", "-W", "--keep-going",
               "--config", str(config_rendering_stored_outputs(tmp_path))]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1500,
                            check=False)
    problems = [line for line in (result.stdout + result.stderr).splitlines()
                if re.search(r"WARNING|ERROR|Error|Traceback", line)]
    assert result.returncode == 0, "\n".join(problems[-40:]) or result.stderr[-4000:]
    html = ROOT / "_build" / "html"
    for path in NOTEBOOKS:
        page = (html / "chapters" / f"{path.stem}.html").read_text()
        assert "cell_output" in page, f"{path.name} was rendered without outputs"


def test_make_test_runs_nbval_again_with_the_float_paths_perturbed():
    """`make test` (so `.ci/run`) ends with nbval over every chapter as another CPU would run it."""
    result = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=True)
    perturbed = [line for line in result.stdout.splitlines() if "pytest chapters" in line]
    assert len(perturbed) == 1, result.stdout
    for setting in ("ATEN_CPU_CAPABILITY=default", "MKL_CBWR=COMPATIBLE", "OMP_NUM_THREADS=1"):
        assert setting in perturbed[0]
