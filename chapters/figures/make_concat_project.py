"""Draw chapter 3's concatenate-then-project as a sum over heads.

concat(o^(0), ..., o^(H-1)) W_O = sum over h of o^(h) W_O^(h), in chapter 3's notation: o^(h) is
head h's output (heads numbered from 0), H the number of heads, and W_O^(h) the block of d rows of
W_O that meets head h's d columns. Drawn with the recipe's sizes: H = 3 heads of d = 6,
H d = 18, e = 12. Run with the course's Python: ``python chapters/figures/make_concat_project.py``;
it rewrites ``concat_project.svg`` next to this file, byte-for-byte reproducibly.
"""

from diagram import BLUE, GREEN, INK, ORANGE, OUTPUT, new_figure, note, save, tint
from matplotlib.patches import Rectangle

WIDTH, HEIGHT = 7.8, 4.3
HEADS = [BLUE, ORANGE, GREEN]
N_ROWS = 0.8  # drawn height of n tokens
D = 0.44  # drawn width (or height) of d = 6 columns (rows)
E = 0.8  # drawn width of e = 12 columns


def block(ax, x0, y0, w, h, colour, text="", *, fontsize=8.5, fill=0.45):
    """A matrix block, lower-left at (x0, y0), with a label inside."""
    ax.add_patch(Rectangle((x0, y0), w, h, facecolor=tint(colour, fill), edgecolor=colour,
                           linewidth=1.3))
    if text:
        note(ax, x0 + w / 2, y0 + h / 2, text, fontsize=fontsize)


def draw():
    fig, ax = new_figure(WIDTH, HEIGHT)
    note(ax, WIDTH / 2, HEIGHT - 0.22,
         "concat(o^(0), …, o^(H−1)) W_O  =  Σ_h o^(h) W_O^(h)", weight="bold", fontsize=11)

    # left: the concatenated heads [n, (h d)] times W_O [(h d), e]
    x0, y_mid = 0.35, 2.05
    for k, colour in enumerate(HEADS):
        block(ax, x0 + k * D, y_mid - N_ROWS / 2, D, N_ROWS, colour, f"o^({k})", fontsize=8)
    note(ax, x0 + 1.5 * D, y_mid + N_ROWS / 2 + 0.12, "concat of heads", fontsize=9, va="bottom",
         weight="bold")
    note(ax, x0 + 1.5 * D, y_mid - N_ROWS / 2 - 0.1, "[n, H d]\n= [n, 18]", mono=True,
         fontsize=8.5, va="top")
    note(ax, x0 + 3 * D + 0.22, y_mid, "×", fontsize=14)
    w0 = x0 + 3 * D + 0.45
    for k, colour in enumerate(HEADS):
        block(ax, w0, y_mid + 1.5 * D - (k + 1) * D, E, D, colour, f"W_O^({k})")
    note(ax, w0 + E / 2, y_mid + 1.5 * D + 0.12, "W_O", fontsize=9, va="bottom", weight="bold")
    note(ax, w0 + E / 2, y_mid - 1.5 * D - 0.1, "[H d, e]\n= [18, 12]", mono=True, fontsize=8.5,
         va="top")
    note(ax, w0 + E + 0.3, y_mid, "=", fontsize=16)

    # right: one product per head, then their sum
    r0 = w0 + E + 0.65
    ys = [3.3, 2.05, 0.8]
    for k, (colour, y) in enumerate(zip(HEADS, ys, strict=True)):
        block(ax, r0, y - N_ROWS / 2, D, N_ROWS, colour, f"o^({k})", fontsize=8)
        note(ax, r0 + D + 0.17, y, "×", fontsize=13)
        block(ax, r0 + D + 0.35, y - D / 2, E, D, colour, f"W_O^({k})")
        note(ax, r0 + D + E + 0.55, y, "=", fontsize=13)
        block(ax, r0 + D + E + 0.75, y - N_ROWS / 2, E, N_ROWS, OUTPUT, f"head {k}\nprojected",
              fill=0.2)
        if k:
            note(ax, r0 + D + E + 0.75 + E / 2, y + N_ROWS / 2 + 0.1, "+", fontsize=14,
                 weight="bold")
        note(ax, r0 + D / 2, y - N_ROWS / 2 - 0.04, "[n, d]", mono=True, fontsize=8, va="top")
        note(ax, r0 + D + 0.35 + E / 2, y - D / 2 - 0.04, "[d, e]", mono=True, fontsize=8,
             va="top")
        note(ax, r0 + D + 2 * E + 0.75 + 0.06, y, "[n, e]", mono=True, fontsize=8, ha="left")
    bracket = r0 + D + 2 * E + 1.35
    ax.plot([bracket - 0.08, bracket, bracket, bracket - 0.08],
            [ys[0] + N_ROWS / 2, ys[0] + N_ROWS / 2, ys[-1] - N_ROWS / 2, ys[-1] - N_ROWS / 2],
            color=INK, linewidth=1.3)
    note(ax, bracket + 0.1, ys[1], "sum:\nthe layer's\noutput\n[n, e]", ha="left", fontsize=9)
    note(ax, 0.35, 0.85,
         "o^(h): head h's output, h = 0, …, H−1.\nW_O^(h): the block of d rows of W_O\n"
         "that meets head h's d columns.\nOne product of the concatenation\n"
         "computes all H products and their sum.",
         ha="left", va="top", fontsize=8.5, colour=INK)
    return fig


if __name__ == "__main__":
    save(draw(), __file__, "mhsa-concat-project")
