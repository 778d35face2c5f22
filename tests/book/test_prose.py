"""The chapters' prose types no measured or computed figure: such numbers are glued.

A number with a unit of time, memory, rate, share or speed-up that a cell computes or measures
must reach the text through myst-nb's glue role ({glue:text}`name:.1f`), so that the page can
never disagree with the output printed above it. This test strips glue roles, inline code, math
and code blocks from the markdown cells of every chapter and from the book's .md pages, and fails
on any figure with such a unit that is left. Figures the code *sets* (a configuration, not a
result) may stay typed; they are listed in ``ALLOWED`` with the reason.
"""

import json
import re
from pathlib import Path

import pytest

from paths import ROOT

CHAPTERS = ROOT / "chapters"
PAGES = sorted(CHAPTERS.glob("*.ipynb")) + sorted(CHAPTERS.glob("*.md"))

# what a measured figure is measured in
UNIT = (r"(?:%|\s?(?:percent|per\s?cent)\b"
        r"|\s(?:s|ms|us|µs|ns|min)\b|\s?(?:seconds?|milliseconds?|microseconds?|minutes?)\b"
        r"|\s?(?:[KMGT]i?B|bytes?)\b"
        r"|\s?(?:[KMGTP]?FLOP/s|[KMGTP]?FLOPS|tokens/s|it/s|images/s)"
        r"|\s?(?:x|×|times)\s+(?:faster|slower|less|more|smaller|larger|fewer)\b"
        r"|(?:x|×)(?=[\s.,;:)]|$))")  # a speed-up "11.4x"; "8 × 32", with a space, is a product
NUMBER = r"(?<![\w.^/])\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(NUMBER + UNIT)

# spans that may hold figures: glue roles, inline code, math, code blocks, targets, URLs
STRIP = [
    re.compile(r"```.*?```", re.DOTALL),  # fenced code (solutions' listings)
    re.compile(r"\$\$.*?\$\$", re.DOTALL),
    re.compile(r"\{glue(?::\w+)?\}`[^`]*`"),
    re.compile(r"`[^`\n]*`"),
    re.compile(r"\$[^$\n]*\$"),
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"https?://\S+"),
]

# (page, typed figure, why it may stay typed): values the code sets, not results it measures
ALLOWED = [
    ("06_decoder_cross_attention.ipynb", "10%", "the share of steps the learning-rate warm-up is set to"),
    ("09_fast_attention.ipynb", "4 bytes", "the size of one float32 number"),
    ("09_fast_attention.ipynb", "2 bytes", "the size of one float16 number"),
    ("09_fast_attention.ipynb", "1.5 TB", "the A100's HBM bandwidth, quoted from Dao et al. 2022"),
    ("09_fast_attention.ipynb", "192 KiB", "the A100's SRAM per processor, quoted from Dao et al. 2022 (their KB)"),
    ("09_fast_attention.ipynb", "100 KiB", "the paper's typical SRAM size, quoted in the cell's unit (the budget is glued)"),
    ("09_fast_attention.ipynb", "312 TFLOP/s", "the A100's float16 matrix rate, quoted from its datasheet"),
    ("10_modern_attention.ipynb", "2 bytes", "the size of one 16-bit number"),
    ("10_modern_attention.ipynb", "5%", "the uptraining compute Ainslie et al. 2023 report"),
    ("10_modern_attention.ipynb", "80 GB", "the memory of one A100 or H100, quoted from their datasheets"),
    ("11_positions_windows_induction.ipynb", "40%", "Kwon et al. 2023's measurement of other systems"),
]


def prose(path: Path) -> str:
    """The markdown text of a page: a .md file, or the markdown cells of a notebook."""
    if path.suffix == ".md":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def typed_figures(text: str) -> list[str]:
    """Every figure with a unit of time, memory, rate, share or speed-up outside the stripped spans."""
    for pattern in STRIP:
        text = pattern.sub(" ", text)
    return [" ".join(m.group(0).split()) for m in FIGURE.finditer(text)]


def test_the_pattern_finds_typed_figures_and_skips_glued_ones():
    text = ("It runs 11.4x faster, in 3.2 ms, at 84% of the matmul rate, needs 8 GiB and 120 GFLOP/s; "
            "glued: {glue:text}`speedup:.1f`x and `torch.randn(8)`, math $2^{10}$ s.")
    assert typed_figures(text) == ["11.4x faster", "3.2 ms", "84%", "8 GiB", "120 GFLOP/s"]
    assert typed_figures("layer 2 of 6, 256 = 8 × 32, head 0, 1e-5, 30 columns, a 2x2 grid") == []


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_prose_types_no_measured_figure(path):
    allowed = {figure for page, figure, _ in ALLOWED if page == path.name}
    found = [f for f in typed_figures(prose(path)) if f not in allowed]
    assert not found, (f"{path.name}: typed figures {found}; glue them from the cell that computes "
                       "them ({glue:text}`name:.1f`), or list a configuration value in ALLOWED")
