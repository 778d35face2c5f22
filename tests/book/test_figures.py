"""The book's diagrams: each ``chapters/figures/make_*.py`` reproduces its committed SVG byte for byte.

Each script runs in a temporary copy of the figures folder (it writes next to itself), with the
Python running the tests, so a changed script whose SVG was not regenerated fails here.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paths import ROOT

FIGURES = ROOT / "chapters" / "figures"
SCRIPTS = sorted(FIGURES.glob("make_*.py"))


def svg_of(script: Path) -> str:
    return script.stem.removeprefix("make_") + ".svg"


def test_every_svg_has_its_script_and_every_script_its_svg():
    made = {svg_of(s) for s in SCRIPTS}
    committed = {p.name for p in FIGURES.glob("*.svg")}
    assert made == committed
    assert {"one_head.svg", "tensor_recipe.svg", "concat_project.svg", "encoder_block.svg",
            "decoder_block.svg", "kv_cache.svg", "learning_path.svg"} <= committed


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_reproduces_its_committed_svg(script, tmp_path):
    for source in FIGURES.glob("*.py"):  # the script and the shared helpers it imports
        shutil.copy(source, tmp_path / source.name)
    result = subprocess.run([sys.executable, script.name], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    made = (tmp_path / svg_of(script)).read_bytes()
    committed = (FIGURES / svg_of(script)).read_bytes()
    assert made == committed, (
        f"{svg_of(script)} differs from what {script.name} draws now: run "
        f"`python chapters/figures/{script.name}` and commit the SVG")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_svg_keeps_its_text_as_text_and_carries_no_date(script):
    svg = (FIGURES / svg_of(script)).read_text()
    texts = re.findall(r"<text\b[^>]*>([^<]*)</text>", svg)
    assert len(texts) >= 10, f"{len(texts)} <text> elements: is svg.fonttype 'none'?"
    assert "<dc:date>" not in svg
    assert not re.search(r'id="DejaVu[\w-]*"', svg), "glyphs drawn as paths (svg.fonttype 'path')"
    # the figure is drawn for the book's ~750 px column: at most 8 inches (576 pt) wide
    width = float(re.search(r'<svg[^>]* width="([\d.]+)pt"', svg)[1])
    assert width <= 8.1 * 72 or script.name == "make_learning_path.py", width
