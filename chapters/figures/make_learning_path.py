"""Draw the course's learning path for the preface: chapters 1-13 as boxes, grouped by part.

Run from anywhere with the course's Python: ``python chapters/figures/make_learning_path.py``.
It rewrites ``learning_path.svg`` next to this file; the output is byte-for-byte reproducible.
Keep PARTS in step with the part captions of ``_toc.yml`` and the chapters' titles (their H1).
"""

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

# (part caption, [(chapter number, title, what the reader builds or learns), ...])
PARTS = [
    ("Part I: One head", [
        (1, "Why context\nmatters", "one word,\ntwo meanings"),
        (2, "The attention\ntable", "queries, keys, softmax,\nweighted values"),
    ]),
    ("Part II: Many heads and masks", [
        (3, "Many heads", "split, attend, merge,\nproject"),
        (4, "Masking", "padding and\ncausal masks"),
    ]),
    ("Part III: The transformer", [
        (5, "The encoder\nlayer", "residuals, layer norm,\nfeed-forward"),
        (6, "The decoder and\ncross-attention", "memory, masked\nself-attention"),
    ]),
    ("Part IV: Beyond text and toy models", [
        (7, "Attention over\nimage patches", "patches as tokens,\na small ViT"),
        (8, "A real model:\nall-MiniLM-L6-v2", "MiniLM's heads on\nreal sentences"),
    ]),
    ("Part V: Making attention fast", [
        (9, "Making attention\nfast", "fused kernels and\nthe KV cache"),
    ]),
    ("Part VI: Attention in today's language models", [
        (10, "Decoder-only\nlanguage models", "a model on real text,\ngrouped-query heads"),
        (11, "Positions, windows\nand induction", "rotary positions,\ncopying from context"),
    ]),
    ("Part VII: Attention since 2024", [
        (12, "The cache diet", "latent attention,\nan int8 cache"),
        (13, "Long context and\nstable scores", "rotary scaling, sinks,\nFlexAttention masks"),
    ]),
]
COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#8172B3", "#C44E52", "#937860", "#DA8BC3"]
OUTPUT = Path(__file__).with_name("learning_path.svg")

# Sizes in inches. The figure is about 11.4 inches wide and the book shows it about 690 px wide,
# so 1 pt of text is about 0.84 px there: 11 pt text reads at about 9 px.
BOX_W, BOX_H = 2.3, 1.3  # one chapter box, in data units (inches at this figure size)
TEXT_PT = 11  # chapter titles (bold) and what each chapter builds
LINE = TEXT_PT * 1.15 / 72  # height of one line of that text
GAP = 0.45  # between the two boxes of a part: room for the arrow
PART_PAD = 0.15  # padding of a part's panel around its boxes
PART_W = 2 * BOX_W + GAP + 2 * PART_PAD
COLUMN_GAP = 0.45  # between the two parts of a row
LEFT = 0.3  # left margin: the arrows from the end of one row to the start of the next run down it
ROW_STEP = 2.35  # from one row of boxes to the next
N_ROWS = (len(PARTS) + 1) // 2
ROW_Y = [0.25 + ROW_STEP * (N_ROWS - 1 - row) for row in range(N_ROWS)]  # bottom of the boxes, top row first
WIDTH = LEFT + 2 * PART_W + COLUMN_GAP
HEIGHT = 0.25 + ROW_STEP * (N_ROWS - 1) + 1.95


def box_origin(part: int, slot: int) -> tuple[float, float]:
    """Lower-left corner of chapter box ``slot`` (0 or 1) of part ``part`` (from 0), two parts a row."""
    column, row = part % 2, part // 2
    x = LEFT + column * (PART_W + COLUMN_GAP) + PART_PAD + slot * (BOX_W + GAP)
    return x, ROW_Y[row]


def arrow(ax, start, end, colour="#444444", style="arc3"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, linewidth=1.6,
                                 color=colour, connectionstyle=style, shrinkA=0, shrinkB=0))


def draw() -> plt.Figure:
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
    ax.set_xlim(0, WIDTH)
    ax.set_ylim(0, HEIGHT)
    ax.axis("off")
    for part, ((caption, chapters), colour) in enumerate(zip(PARTS, COLOURS, strict=True)):
        x0, y0 = box_origin(part, 0)
        ax.add_patch(FancyBboxPatch((x0 - PART_PAD, y0 - PART_PAD), PART_W, BOX_H + 2 * PART_PAD + 0.32,
                                    boxstyle="round,pad=0,rounding_size=0.12", facecolor=colour,
                                    alpha=0.12, edgecolor="none"))
        ax.text(x0 - PART_PAD + 0.12, y0 + BOX_H + 0.17, caption, fontsize=12, fontweight="bold",
                color=colour, va="center", ha="left")
        for slot, (number, title, detail) in enumerate(chapters):
            x, y = box_origin(part, slot)
            ax.add_patch(FancyBboxPatch((x, y), BOX_W, BOX_H, boxstyle="round,pad=0,rounding_size=0.1",
                                        facecolor="white", edgecolor=colour, linewidth=1.8))
            ax.text(x + 0.12, y + BOX_H - 0.12, str(number), fontsize=16, fontweight="bold",
                    color=colour, va="top", ha="left")
            indent = 0.42 if number < 10 else 0.56  # room for a two-digit number
            ax.text(x + indent, y + BOX_H - 0.15, title, fontsize=TEXT_PT, fontweight="bold",
                    va="top", ha="left", linespacing=1.15)
            # what the chapter builds: below the title, across the whole box
            below_title = y + BOX_H - 0.15 - LINE * (title.count("\n") + 1) - 0.1
            ax.text(x + 0.12, below_title, detail, fontsize=TEXT_PT, color="#444444", va="top",
                    ha="left", linespacing=1.15)
        if len(chapters) == 2:  # within a part: its first chapter -> its second
            arrow(ax, (x0 + BOX_W + 0.06, y0 + BOX_H / 2), (x0 + BOX_W + GAP - 0.06, y0 + BOX_H / 2))
    for part in range(len(PARTS) - 1):
        x, y = box_origin(part, len(PARTS[part][1]) - 1)  # the part's last chapter
        nx, ny = box_origin(part + 1, 0)  # the next part's first chapter
        if part % 2 == 0:  # across a row: I -> II, III -> IV
            arrow(ax, (x + BOX_W + 0.06, y + BOX_H / 2), (nx - 0.06, y + BOX_H / 2))
        else:  # from the end of a row down the left margin to the next row: II -> III, IV -> V
            middle = (y - PART_PAD + ny + BOX_H + PART_PAD + 0.32) / 2  # between the two rows' panels
            margin = LEFT / 2
            ax.plot([x + BOX_W / 2, x + BOX_W / 2, margin, margin],
                    [y - 0.06, middle, middle, ny + BOX_H / 2],
                    color="#444444", linewidth=1.6, solid_joinstyle="miter")
            arrow(ax, (margin, ny + BOX_H / 2), (nx - 0.06, ny + BOX_H / 2))
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
    return fig


def main() -> None:
    plt.rcParams["svg.hashsalt"] = "mhsa-learning-path"  # stable ids: the SVG is reproducible
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: searchable, read by screen readers
    fig = draw()
    fig.savefig(OUTPUT, format="svg", metadata={"Date": None, "Creator": None})
    print(f"wrote {OUTPUT.name}")


if __name__ == "__main__":
    main()
