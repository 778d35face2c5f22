"""Draw the paged KV cache of chapter 11's "Going further" box (after Kwon et al. 2023, figure 6).

Run from anywhere with the course's Python: ``python chapters/figures/make_paged_kv_cache.py``.
It rewrites ``paged_kv_cache.svg`` next to this file; the output is byte-for-byte reproducible,
and its text stays text (``svg.fonttype: none``).
"""

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

OUTPUT = Path(__file__).with_name("paged_kv_cache.svg")
BLOCK = 4  # tokens per block in the drawing (vLLM's default is 16)
# sequence name -> (its tokens, the physical block of each logical block), colour
SEQUENCES = {
    "A": (["Four", "score", "and", "seven", "years", "ago", "our", "fathers", "brought"], [5, 1, 3], "#4C72B0"),
    "B": (["It", "was", "the", "best", "of", "times"], [7, 2], "#DD8452"),
}
N_PHYSICAL = 8
CELL_W, CELL_H = 1.1, 0.55


def block_row(ax, x, y, words, colour, label):
    """One block: BLOCK token slots, filled with ``words`` (possibly fewer)."""
    for slot in range(BLOCK):
        filled = slot < len(words)
        ax.add_patch(Rectangle((x + slot * CELL_W, y), CELL_W, CELL_H, facecolor=colour if filled else "white",
                               alpha=0.25 if filled else 1.0, edgecolor="black", linewidth=0.8))
        if filled:
            ax.text(x + (slot + 0.5) * CELL_W, y + CELL_H / 2, words[slot], ha="center", va="center", fontsize=6.5)
    ax.text(x - 0.15, y + CELL_H / 2, label, ha="right", va="center", fontsize=8.5)


def draw() -> plt.Figure:
    fig, ax = plt.subplots(figsize=(8.0, 4.9))
    ax.set_xlim(-1.5, 17.5)
    ax.set_ylim(0.6, 10.2)
    ax.axis("off")
    ax.text(0.2, 9.8, "logical blocks (per sequence)", fontsize=9, fontweight="bold")
    ax.text(6.7, 9.8, "block table", fontsize=9, fontweight="bold")
    ax.text(10.9, 9.8, "physical blocks (one shared pool)", fontsize=9, fontweight="bold")
    where = {}  # physical block -> (sequence, logical index, words, colour)
    y = 9.0
    for name, (words, table, colour) in SEQUENCES.items():
        ax.text(-1.3, y + 0.25, f"sequence {name}", fontsize=8.5, color=colour, fontweight="bold")
        y -= 0.15
        for logical, physical in enumerate(table):
            y -= 0.75
            chunk = words[logical * BLOCK:(logical + 1) * BLOCK]
            block_row(ax, 0.7, y, chunk, colour, f"block {logical}")
            ax.text(7.6, y + CELL_H / 2, f"{logical} → {physical}", ha="center", va="center", fontsize=9,
                    bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": colour})
            where[physical] = (name, logical, chunk, colour, y)
        y -= 0.5
    for physical in range(N_PHYSICAL):
        py = 9.0 - 0.15 - (physical + 1) * 0.95 + 0.2
        name, logical, chunk, colour, ly = where.get(physical, (None, None, [], "white", None))
        block_row(ax, 12.2, py, chunk, colour, f"physical {physical}" + ("" if name else " (free)"))
        if name:
            ax.add_patch(FancyArrowPatch((8.3, ly + CELL_H / 2), (10.6, py + CELL_H / 2), arrowstyle="-|>",
                                         mutation_scale=10, color=colour, linewidth=1.2))
    ax.text(0.7, 0.9, f"{BLOCK} tokens per block; only the last block of a sequence is partly empty",
            fontsize=8.5, color="#555555")
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
    return fig


def main() -> None:
    plt.rcParams["svg.hashsalt"] = "mhsa-paged-kv-cache"  # stable ids: the SVG is reproducible
    plt.rcParams["svg.fonttype"] = "none"  # text stays text
    fig = draw()
    fig.savefig(OUTPUT, format="svg", metadata={"Date": None})
    print(f"wrote {OUTPUT.name}")


if __name__ == "__main__":
    main()
