"""Draw chapter 3's tensor recipe: project, split, attend per head, merge, project, with every shape.

The steps carry the numbers of Source A's 11-step recipe as chapter 3 runs it: 1 input, 2 project,
3-4 split, 5-6 scores and softmax, 7 weighted sum, 8-9 merge, 10 output projection, 11 result.

Run with the course's Python: ``python chapters/figures/make_tensor_recipe.py``. It rewrites
``tensor_recipe.svg`` next to this file, byte-for-byte reproducibly. Legend: b batch, n tokens,
h heads, d head_dim, e embed_dim, i/j query/key positions. On the right, the chapter's first example:
30 columns read as h = 10 heads of d = 3 columns.
"""

from diagram import (
    BLUE,
    GREEN,
    INK,
    INPUT,
    ORANGE,
    OUTPUT,
    PURPLE,
    QUERY,
    RED,
    VALUE,
    arrow,
    box,
    new_figure,
    note,
    save,
    tint,
)
from matplotlib.patches import Rectangle

WIDTH, HEIGHT = 7.8, 6.2
X, BOX_W, BOX_H = 1.45, 2.1, 0.48  # the pipeline's column of boxes
# (title, shape, colour) from top to bottom, and between each pair the step that connects them
STAGES = [
    ("x (step 1)", "[b, n, e]", INPUT),
    ("query, key, value", "[b, n, (h d)]", QUERY),
    ("q, k, v per head", "[b, h, n, d]", QUERY),
    ("attention weights", "[b, h, i, j]", OUTPUT),
    ("head outputs", "[b, h, n, d]", VALUE),
    ("heads side by side", "[b, n, (h d)]", VALUE),
    ("result (step 11)", "[b, n, e]", INPUT),
]
STEPS = [  # (the text's step numbers and name, what it does, height of the gap)
    ("2 project", "x W_Q, x W_K, x W_V", 0.38),
    ("3–4 split", '"b n (h d) -> b h n d"', 0.38),
    ("5–6 attend\nper head", 'scores "b h i d, b h j d -> b h i j"\n÷ √d, softmax over j', 0.5),
    ("7", 'weighted sum of values\n"b h i j, b h j d -> b h i d"', 0.5),
    ("8–9 merge", '"b h n d -> b n (h d)"', 0.38),
    ("10 project", "× W_O: width (h d) -> e", 0.38),
]
HEAD_COLOURS = [BLUE, ORANGE, GREEN, PURPLE, RED]


def pipeline(ax):
    ys = [HEIGHT - 0.35]
    for *_, gap in STEPS:
        ys.append(ys[-1] - BOX_H - gap)
    for (title, shape, colour), y in zip(STAGES, ys, strict=True):
        box(ax, X, y, BOX_W, BOX_H, "", colour)
        note(ax, X - BOX_W / 2 + 0.1, y, title, ha="left", weight="bold", fontsize=9.5)
        note(ax, X + BOX_W / 2 + 0.08, y, shape, ha="left", mono=True, fontsize=9.5, weight="bold",
             colour=colour)
    for (step, pattern, _), top, bottom in zip(STEPS, ys[:-1], ys[1:], strict=True):
        arrow(ax, (X, top - BOX_H / 2 - 0.03), (X, bottom + BOX_H / 2 + 0.03))
        middle = (top + bottom) / 2
        note(ax, X - 0.1, middle, step, ha="right", fontsize=8.5, weight="bold")
        note(ax, X + 0.1, middle, pattern, ha="left", fontsize=8.5, mono=True)


def block_colour(head: int) -> str:
    """Ten heads in the five course colours, full and light."""
    return tint(HEAD_COLOURS[head % 5], 0.85 if head < 5 else 0.4)


def example(ax, left=4.3, top=6.05):
    """The 30 = 10 x 3 split of chapter 3's first cell: column c goes to head c // 3."""
    note(ax, left, top, "Example: (h d) = 30 = 10 × 3", ha="left", weight="bold")
    cell = 0.108
    y = top - 0.55
    for c in range(30):
        ax.add_patch(Rectangle((left + c * cell, y), cell, 0.26, facecolor=block_colour(c // 3),
                               edgecolor="white", linewidth=0.6))
    for c in range(0, 30, 3):
        note(ax, left + (c + 0.5) * cell, y - 0.05, str(c), fontsize=7.5, va="top")
    note(ax, left, y + 0.38, "30 columns of one token's query", ha="left", fontsize=8.5)
    arrow(ax, (left + 0.3, y - 0.3), (left + 0.3, y - 0.65))
    note(ax, left + 0.42, y - 0.47, '"b n (h d) -> b h n d", h=10', ha="left",
         fontsize=8, mono=True)
    small = 0.2
    for head in range(10):
        row, col = divmod(head, 5)
        x0 = left + col * 0.68
        y0 = y - 1.2 - row * 0.62
        for k in range(3):
            ax.add_patch(Rectangle((x0 + k * small, y0), small, small,
                                   facecolor=block_colour(head), edgecolor="white", linewidth=0.8))
            note(ax, x0 + (k + 0.5) * small, y0 + small / 2, str(3 * head + k), fontsize=7.5,
                 colour="white" if head < 5 else INK)
        note(ax, x0 + 1.5 * small, y0 + small + 0.04, f"head {head}", fontsize=8, va="bottom")
    bottom = y - 1.2 - 0.62 - 0.12
    note(ax, left, bottom,
         "head h gets columns 3h to 3h+2: 10 heads,\nd = 3 columns each. Merging reads the same\n"
         "pattern backwards and restores all 30 exactly.", ha="left", va="top", fontsize=8.5)
    note(ax, left, bottom - 0.9,
         "In the recipe's run: e = 12, (h d) = 18 = 3 × 6.\n"
         "b batch, n tokens, h heads, d head_dim,\ne embed_dim, i/j query/key positions.",
         ha="left", va="top", fontsize=8.5, colour=INK)


def draw():
    fig, ax = new_figure(WIDTH, HEIGHT)
    pipeline(ax)
    example(ax)
    return fig


if __name__ == "__main__":
    save(draw(), __file__, "mhsa-tensor-recipe")
