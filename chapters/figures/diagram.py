"""Shared drawing helpers for the course's box-and-arrow diagrams (the ``make_*.py`` scripts here).

Coordinates are inches: a figure ``width`` x ``height`` inches has data limits ``[0, width]`` and
``[0, height]``, so a box of width 1 is one inch wide on the page. The book's content column is about
750 px, which a figure 7.8 inches wide fills without scaling: 10 pt text then reads at 13 px.

Colours are the course's (the learning path's): input x blue, query orange, key green, value purple,
output red. Text stays text in the SVG (``svg.fonttype = "none"``), searchable and readable by screen
readers; a fixed ``svg.hashsalt`` and no date make the output byte-for-byte reproducible.
"""

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

BLUE, ORANGE, GREEN, PURPLE, RED = "#4C72B0", "#DD8452", "#55A868", "#8172B3", "#C44E52"
GREY, INK = "#8C8C8C", "#333333"
INPUT, QUERY, KEY, VALUE, OUTPUT = BLUE, ORANGE, GREEN, PURPLE, RED
MONO = "monospace"  # shapes and einops patterns: DejaVu Sans Mono, else any monospace font


def tint(colour: str, amount: float = 0.15) -> str:
    """``colour`` mixed with white: ``amount`` 0 is white, 1 is the colour itself."""
    rgb = matplotlib.colors.to_rgb(colour)
    mixed = (1 - amount + amount * c for c in rgb)
    return matplotlib.colors.to_hex(tuple(mixed))


def new_figure(width: float, height: float):
    """A blank figure ``width`` x ``height`` inches whose data coordinates are inches."""
    plt.rcParams.update({"svg.fonttype": "none", "font.size": 10})
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def box(ax, cx, cy, w, h, text="", colour=GREY, *, shape=None, fontsize=10, weight="bold",
        fill=0.15, linestyle="-", text_colour=INK):
    """A rounded box centred at (cx, cy) with a title and, below it, a shape in monospace."""
    ax.add_patch(FancyBboxPatch((cx - w / 2, cy - h / 2), w, h,
                                boxstyle="round,pad=0,rounding_size=0.08",
                                facecolor=tint(colour, fill) if fill else "white", edgecolor=colour,
                                linewidth=1.6, linestyle=linestyle))
    if shape is None:
        ax.text(cx, cy, text, ha="center", va="center", fontsize=fontsize, fontweight=weight,
                color=text_colour, linespacing=1.2)
    else:
        ax.text(cx, cy + 0.03, text, ha="center", va="bottom", fontsize=fontsize, fontweight=weight,
                color=text_colour, linespacing=1.2)
        ax.text(cx, cy - 0.03, shape, ha="center", va="top", fontsize=fontsize - 1, family=MONO,
                color=text_colour)
    return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


def arrow(ax, start, end, colour=INK, *, style="arc3", width=1.5, dashed=False):
    """An arrow from ``start`` to ``end`` (points in inches)."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=13, linewidth=width,
                                 color=colour, connectionstyle=style, shrinkA=0, shrinkB=0,
                                 linestyle="--" if dashed else "-"))


def path_arrow(ax, points, colour=INK, *, width=1.5, dashed=False):
    """Straight segments through ``points``, with an arrow head on the last one."""
    xs, ys = zip(*points[:-1], strict=True)
    ax.plot(xs, ys, color=colour, linewidth=width, solid_joinstyle="miter",
            linestyle="--" if dashed else "-")
    arrow(ax, points[-2], points[-1], colour, width=width, dashed=dashed)


def note(ax, x, y, text, *, colour=INK, fontsize=9, ha="center", va="center", mono=False,
         weight="normal", align=None):
    """Free text: labels on arrows, shapes, captions; ``align`` aligns the lines of a block."""
    return ax.text(x, y, text, ha=ha, va=va, fontsize=fontsize, color=colour, linespacing=1.25,
                   family=MONO if mono else None, fontweight=weight, multialignment=align)


def plus(ax, cx, cy, r=0.14, colour=INK):
    """A circled plus: the residual addition."""
    ax.add_patch(Circle((cx, cy), r, facecolor="white", edgecolor=colour, linewidth=1.5))
    note(ax, cx, cy, "+", fontsize=13, weight="bold", colour=colour)


def table(ax, x0, y0, cell, values, colour, *, rows=None, cols=None, fontsize=8.5,
          edge="white", row_colour=INK, col_colour=INK):
    """A grid of cells shaded by ``values`` (0..1), top-left at (x0, y0); optional row/column labels."""
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            face = "white" if value is None else tint(colour, 0.1 + 0.9 * value)
            hatch_edge = GREY if value is None else edge
            ax.add_patch(Rectangle((x0 + j * cell, y0 - (i + 1) * cell), cell, cell,
                                   facecolor=face, edgecolor=hatch_edge, linewidth=0.8))
    for i, name in enumerate(rows or []):
        note(ax, x0 - 0.06, y0 - (i + 0.5) * cell, name, ha="right", fontsize=fontsize,
             colour=row_colour)
    for j, name in enumerate(cols or []):
        note(ax, x0 + (j + 0.5) * cell, y0 + 0.06, name, va="bottom", fontsize=fontsize,
             colour=col_colour)
    n_rows, n_cols = len(values), len(values[0])
    ax.add_patch(Rectangle((x0, y0 - n_rows * cell), n_cols * cell, n_rows * cell, fill=False,
                           edgecolor=colour, linewidth=1.2))
    return (x0, y0 - n_rows * cell, x0 + n_cols * cell, y0)


def save(fig, script: str, salt: str) -> Path:
    """Write ``fig`` as SVG next to ``script``, named after it (``make_one_head.py`` -> ``one_head.svg``)."""
    output = Path(script).with_name(Path(script).stem.removeprefix("make_") + ".svg")
    plt.rcParams["svg.hashsalt"] = salt  # stable ids: the SVG is reproducible
    fig.savefig(output, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    print(f"wrote {output.name}")
    return output


def stack(ax, cx, top, items, *, step=0.5, box_w=1.75, box_h=0.36, side=1.15, fontsize=9.5):
    """A block drawn top to bottom: a spine of items joined by arrows, with residual paths.

    ``items``: ``("text", label)`` (the input or output, no box), ``("box", label, colour)``, or
    ``("plus", start)``: a residual addition whose other input branches off the spine just
    above item ``start`` and runs down the right side. Returns the items' y positions.
    """
    ys = [top - k * step for k in range(len(items))]
    half = {"text": 0.1, "box": box_h / 2, "plus": 0.14}  # half height of each kind of item
    for k, (item, y) in enumerate(zip(items, ys, strict=True)):
        kind = item[0]
        if kind == "text":
            note(ax, cx, y, item[1], fontsize=fontsize, mono=True, weight="bold")
        elif kind == "box":
            box(ax, cx, y, box_w, box_h, item[1], item[2], fontsize=fontsize, weight="normal",
                fill=0.2)
        else:
            plus(ax, cx, y)
            above, below = items[item[1] - 1], items[item[1]]  # the branch is between these
            branch = (ys[item[1] - 1] - half[above[0]] + ys[item[1]] + half[below[0]]) / 2 + 0.03
            ax.plot([cx], [branch], marker="o", markersize=4, color=INK)
            path_arrow(ax, [(cx, branch), (cx + side, branch), (cx + side, y), (cx + 0.16, y)],
                       INPUT)
        if k:  # the arrow from the previous item
            previous = items[k - 1][0]
            start, end = ys[k - 1] - half[previous], y + half[kind]
            arrow(ax, (cx, start - 0.02), (cx, end + 0.02))
    return ys
