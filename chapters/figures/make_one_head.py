"""Draw one attention head for chapter 2: x -> Q, K, V -> scores -> softmax -> weighted values -> + x.

Run with the course's Python: ``python chapters/figures/make_one_head.py``. It rewrites
``one_head.svg`` next to this file, byte-for-byte reproducibly. Legend: n tokens, e embed_dim,
d head_dim (the d_k of chapter 2), i/j query/key positions.
"""

from diagram import (
    GREY,
    INPUT,
    KEY,
    OUTPUT,
    QUERY,
    VALUE,
    arrow,
    box,
    new_figure,
    note,
    path_arrow,
    plus,
    save,
    table,
)

TOKENS = ["Hello", "world", "!"]
SCORES = [[0.35, 0.55, 0.9], [0.15, 0.45, 1.0], [0.5, 0.3, 0.8]]  # shades only, for the picture
WEIGHTS = [[0.15, 0.3, 0.7], [0.05, 0.2, 0.85], [0.3, 0.15, 0.65]]
WIDTH, HEIGHT = 7.8, 4.4
CELL = 0.44
ROW = 0.95  # height of the bottom row: V, output, residual


def draw():
    fig, ax = new_figure(WIDTH, HEIGHT)
    note(ax, 0.12, 4.3, "n tokens, e embed_dim,\nd head_dim, i/j query/key", ha="left", va="top",
         fontsize=8.5)
    x_box = box(ax, 0.55, 2.45, 0.85, 0.8, "x", INPUT, shape="[n, e]", fontsize=12)
    q_box = box(ax, 2.05, 3.45, 1.2, 0.7, "Q = x W_Q", QUERY, shape="[n, d]")
    k_box = box(ax, 2.05, 2.45, 1.2, 0.7, "K = x W_K", KEY, shape="[n, d]")
    v_box = box(ax, 2.05, ROW, 1.2, 0.7, "V = x W_V", VALUE, shape="[n, e]")
    for target in (q_box, k_box, v_box):
        arrow(ax, (x_box[2] + 0.04, 2.45), (target[0] - 0.04, (target[1] + target[3]) / 2))

    # the score table: queries on the rows (i), keys on the columns (j)
    left, top = 3.75, 3.7
    scores = table(ax, left, top, CELL, SCORES, GREY, rows=TOKENS, cols=TOKENS,
                   row_colour=QUERY, col_colour=KEY)
    centre = (scores[0] + scores[2]) / 2
    note(ax, centre, top + 0.42, "scores S = Q Kᵀ / √d", weight="bold", fontsize=10)
    note(ax, centre, scores[1] - 0.2, "[n, n]: query i, key j", mono=True, fontsize=8.5)
    arrow(ax, (q_box[2] + 0.04, 3.45), (left - 0.5, 3.3), QUERY)
    arrow(ax, (k_box[2] + 0.04, 2.45), (left - 0.5, 2.75), KEY)

    # softmax of each row -> the weights
    w_left = 6.05
    y_mid = top - 1.5 * CELL
    arrow(ax, (scores[2] + 0.08, y_mid), (w_left - 0.1, y_mid))
    note(ax, (scores[2] + w_left) / 2, y_mid + 0.1, "softmax\nof each\nrow", fontsize=8.5,
         va="bottom")
    weights = table(ax, w_left, top, CELL, WEIGHTS, OUTPUT, cols=TOKENS, col_colour=KEY)
    middle = (weights[0] + weights[2]) / 2
    note(ax, middle, top + 0.42, "weights A", weight="bold")
    note(ax, middle, weights[1] - 0.2, "[n, n], rows sum to 1", mono=True, fontsize=8.5)

    # weighted sum of the values, then the residual
    o_box = box(ax, 5.0, ROW, 1.15, 0.7, "O = A V", OUTPUT, shape="[n, e]")
    arrow(ax, (middle - 0.3, weights[1] - 0.35), (o_box[2] - 0.25, o_box[3] + 0.04))
    arrow(ax, (v_box[2] + 0.04, ROW), (o_box[0] - 0.04, ROW), VALUE)
    note(ax, (v_box[2] + o_box[0]) / 2, ROW + 0.08, "weighted sum\nof the values:\no_i = Σ_j A_ij v_j",
         fontsize=8.5, va="bottom")
    x_plus = 6.3
    plus(ax, x_plus, ROW)
    arrow(ax, (o_box[2] + 0.04, ROW), (x_plus - 0.18, ROW))
    path_arrow(ax, [(0.55, x_box[1] - 0.04), (0.55, 0.2), (x_plus, 0.2), (x_plus, ROW - 0.18)],
               INPUT)
    note(ax, 4.0, 0.33, "residual: add the input back", colour=INPUT, fontsize=8.5)
    out = box(ax, 7.2, ROW, 0.95, 0.7, "x + O", INPUT, shape="[n, e]")
    arrow(ax, (x_plus + 0.18, ROW), (out[0] - 0.04, ROW))
    return fig


if __name__ == "__main__":
    save(draw(), __file__, "mhsa-one-head")
