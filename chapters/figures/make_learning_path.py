"""Draw the course's learning path for the preface: chapters 1-8 as boxes, grouped by part.

Run from anywhere with the course's Python: ``python chapters/figures/make_learning_path.py``.
It rewrites ``learning_path.svg`` next to this file; the output is byte-for-byte reproducible.
Keep PARTS in step with the part captions and chapter titles of ``_toc.yml``.
"""

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

# (part caption, [(chapter number, title, what the reader builds or learns), ...])
PARTS = [
    ("Part I: One head", [
        (1, "Why context matters", "one word, two meanings"),
        (2, "The attention table", "queries, keys, softmax,\nweighted values"),
    ]),
    ("Part II: Many heads and masks", [
        (3, "Multi-head attention", "split, attend, merge,\nproject"),
        (4, "Masking", "padding and\ncausal masks"),
    ]),
    ("Part III: The transformer layers", [
        (5, "The encoder layer", "residuals, layer norm,\nfeed-forward"),
        (6, "Decoder and\ncross-attention", "memory, masked\nself-attention"),
    ]),
    ("Part IV: Beyond text and toy models", [
        (7, "Image patches", "attention over\npatches (ViT)"),
        (8, "A real pretrained\nmodel", "MiniLM's heads on\nreal sentences"),
    ]),
]
COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#8172B3"]
OUTPUT = Path(__file__).with_name("learning_path.svg")

BOX_W, BOX_H = 2.1, 1.15  # one chapter box, in data units (inches at this figure size)
GAP = 0.55  # between the two boxes of a part: room for the arrow
PART_PAD = 0.18  # padding of a part's panel around its boxes
PART_W = 2 * BOX_W + GAP + 2 * PART_PAD
COLUMN_GAP = 0.5  # between the two parts of a row
LEFT = 0.35  # left margin: the arrow from chapter 4 back to chapter 5 runs down it
ROW_Y = [2.5, 0.25]  # bottom of the boxes in each row
WIDTH = LEFT + 2 * PART_W + COLUMN_GAP
HEIGHT = 4.3


def box_origin(part: int, slot: int) -> tuple[float, float]:
    """Lower-left corner of chapter box ``slot`` (0 or 1) of part ``part`` (0-3), two parts a row."""
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
        ax.text(x0 - PART_PAD + 0.12, y0 + BOX_H + 0.14, caption, fontsize=10.5, fontweight="bold",
                color=colour, va="center", ha="left")
        for slot, (number, title, detail) in enumerate(chapters):
            x, y = box_origin(part, slot)
            ax.add_patch(FancyBboxPatch((x, y), BOX_W, BOX_H, boxstyle="round,pad=0,rounding_size=0.1",
                                        facecolor="white", edgecolor=colour, linewidth=1.8))
            ax.text(x + 0.14, y + BOX_H - 0.2, str(number), fontsize=15, fontweight="bold",
                    color=colour, va="top", ha="left")
            ax.text(x + 0.48, y + BOX_H - 0.2, title, fontsize=9.5, fontweight="bold", va="top",
                    ha="left", linespacing=1.15)
            ax.text(x + 0.48, y + BOX_H - 0.66, detail, fontsize=8.5, color="#555555", va="top",
                    ha="left", linespacing=1.15)
        # within a part: chapter 2k-1 -> chapter 2k
        arrow(ax, (x0 + BOX_W + 0.06, y0 + BOX_H / 2), (x0 + BOX_W + GAP - 0.06, y0 + BOX_H / 2))
    # between parts: I -> II and III -> IV across a row, II -> III from the end of row 1 to row 2
    for part in (0, 2):
        x, y = box_origin(part, 1)
        nx, _ = box_origin(part + 1, 0)
        arrow(ax, (x + BOX_W + 0.06, y + BOX_H / 2), (nx - 0.06, y + BOX_H / 2))
    x4, y4 = box_origin(1, 1)
    x5, y5 = box_origin(2, 0)
    middle = (y4 - PART_PAD + y5 + BOX_H + PART_PAD + 0.32) / 2  # between the two rows' panels
    margin = LEFT / 2
    ax.plot([x4 + BOX_W / 2, x4 + BOX_W / 2, margin, margin],
            [y4 - 0.06, middle, middle, y5 + BOX_H / 2],
            color="#444444", linewidth=1.6, solid_joinstyle="miter")
    arrow(ax, (margin, y5 + BOX_H / 2), (x5 - 0.06, y5 + BOX_H / 2))
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
    return fig


def main() -> None:
    plt.rcParams["svg.hashsalt"] = "mhsa-learning-path"  # stable ids: the SVG is reproducible
    fig = draw()
    fig.savefig(OUTPUT, format="svg", metadata={"Date": None})
    print(f"wrote {OUTPUT.name}")


if __name__ == "__main__":
    main()
