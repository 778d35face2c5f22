"""Draw the paged KV cache of chapter 11's "Going further" box (after Kwon et al. 2023, figure 6).

Run from anywhere with the course's Python: ``python chapters/figures/make_paged_kv_cache.py``.
It rewrites ``paged_kv_cache.svg`` next to this file; the output is byte-for-byte reproducible,
and its text stays text (``svg.fonttype: none``).

The drawing uses 4 tokens per block (vLLM's default is 16) so that every word fits its cell in
9-point type: at the book's ~690 px column the smallest text is about 10 px high.
"""

from diagram import BLUE, GREY, INK, ORANGE, new_figure, note, save, tint
from matplotlib.patches import FancyArrowPatch, Rectangle

WIDTH, HEIGHT = 7.8, 4.75  # inches; coordinates are inches (see diagram.py)
BLOCK = 4  # tokens per block in the drawing
# sequence name -> (its tokens, the physical block of each logical block, colour)
SEQUENCES = {
    "A": (["Four", "score", "and", "seven", "years", "ago", "our", "fathers", "brought"], [5, 1, 3], BLUE),
    "B": (["It", "was", "the", "best", "of", "times"], [7, 2], ORANGE),
}
N_PHYSICAL = 8
CELL_W, CELL_H = 0.6, 0.34
WORD_SIZE = 9  # the smallest text in the figure
LOGICAL_X, TABLE_X, PHYSICAL_X = 0.75, 3.55, 5.25  # left edges of the logical and physical cells, table centre
TOP = HEIGHT - 0.75  # centre of the first row
ROW = 0.45  # row pitch
BASELINE = 0.045  # a word's baseline this far below the row's centre: every word sits on the same line


def block_row(ax, x, y, words, colour, label):
    """One block centred on height ``y``: BLOCK token slots, filled with ``words`` (possibly fewer)."""
    for slot in range(BLOCK):
        filled = slot < len(words)
        ax.add_patch(Rectangle((x + slot * CELL_W, y - CELL_H / 2), CELL_W, CELL_H,
                               facecolor=tint(colour, 0.25) if filled else "white",
                               edgecolor=INK, linewidth=0.8))
        if filled:
            note(ax, x + (slot + 0.5) * CELL_W, y - BASELINE, words[slot], fontsize=WORD_SIZE, va="baseline")
    note(ax, x - 0.08, y - BASELINE, label, ha="right", va="baseline", fontsize=9.5)


def draw():
    fig, ax = new_figure(WIDTH, HEIGHT)
    header_y = HEIGHT - 0.3  # the headers' baseline
    note(ax, LOGICAL_X + 2 * CELL_W, header_y, "logical blocks", fontsize=10.5, weight="bold", va="baseline")
    note(ax, TABLE_X, header_y, "block table", fontsize=10.5, weight="bold", va="baseline")
    note(ax, PHYSICAL_X + 4 * CELL_W, header_y, "physical blocks (one shared pool)", ha="right",
         fontsize=10.5, weight="bold", va="baseline")
    where = {}  # physical block -> (logical block's words, colour, its row's height)
    y = TOP
    for name, (words, table, colour) in SEQUENCES.items():
        note(ax, 0.05, y, f"sequence {name}", ha="left", fontsize=10, colour=colour, weight="bold")
        for logical, physical in enumerate(table):
            y -= ROW
            chunk = words[logical * BLOCK:(logical + 1) * BLOCK]
            block_row(ax, LOGICAL_X, y, chunk, colour, f"block {logical}")
            note(ax, TABLE_X, y, f"{logical} → {physical}", fontsize=10).set_bbox(
                {"boxstyle": "round", "facecolor": "white", "edgecolor": colour})
            where[physical] = (chunk, colour, y)
        y -= ROW + 0.1
    for physical in range(N_PHYSICAL):
        py = TOP - physical * ROW
        chunk, colour, logical_y = where.get(physical, ([], "white", None))
        block_row(ax, PHYSICAL_X, py, chunk, colour, str(physical))
        if logical_y is None:
            note(ax, PHYSICAL_X + CELL_W / 2, py - BASELINE, "free", fontsize=WORD_SIZE, colour=GREY,
                 va="baseline")
        else:
            ax.add_patch(FancyArrowPatch((TABLE_X + 0.38, logical_y), (PHYSICAL_X - 0.22, py),
                                         arrowstyle="-|>", mutation_scale=11, color=colour, linewidth=1.3,
                                         shrinkA=0, shrinkB=0))
    note(ax, 0.05, 0.3, f"Drawn with {BLOCK} tokens per block so that the words fit (vLLM's default is 16).\n"
         "Only the last block of a sequence is partly empty.", ha="left", fontsize=9.5, align="left")
    return fig


if __name__ == "__main__":
    save(draw(), __file__, "mhsa-paged-kv-cache")
