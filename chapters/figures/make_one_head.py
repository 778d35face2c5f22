"""Draw one attention head for chapter 2: x -> Q, K, V -> scores -> softmax -> weighted values -> + x.

Run with the course's Python: ``python chapters/figures/make_one_head.py``. It rewrites
``one_head.svg`` next to this file, byte-for-byte reproducibly. Notation as in chapter 2: n tokens,
e embed_dim, d_k the width of queries and keys, q_i · k_j / √d_k the scaled score and w_ij the weight of query i
and key j, o_i the output of token i. Queries take the rows of the table and keys its columns, so the
K arrow lands on the column labels. The shading follows chapter 2's real table for "Hello world !"
(the largest score and weight of every row in Hello's column), rounded: it is a picture, not data.
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
# shades from chapter 2's table: scaled scores mapped to 0..1 over their range, and the weights
SCORES = [[1.0, 0.5, 0.7], [0.25, 0.1, 0.1], [0.7, 0.0, 0.55]]
WEIGHTS = [[0.64, 0.11, 0.25], [0.44, 0.29, 0.27], [0.58, 0.05, 0.37]]
WIDTH, HEIGHT = 7.8, 4.75
CELL = 0.44
ROW = 0.85  # height of the bottom row: V, output, residual


def draw():
    fig, ax = new_figure(WIDTH, HEIGHT)
    note(ax, WIDTH - 0.1, HEIGHT - 0.1, "n tokens, e embed_dim,\nd_k: width of queries and keys,\n"
         "i/j: query/key position", ha="right", va="top", fontsize=8.5, align="right")
    x_y = 2.75
    x_box = box(ax, 0.55, x_y, 0.85, 0.8, "x", INPUT, shape="[n, e]", fontsize=12)
    k_box = box(ax, 2.05, 4.2, 1.2, 0.66, "K = x W_K", KEY, shape="[n, d_k]")
    q_box = box(ax, 2.05, 3.05, 1.2, 0.66, "Q = x W_Q", QUERY, shape="[n, d_k]")
    v_box = box(ax, 2.05, ROW, 1.2, 0.66, "V = x W_V", VALUE, shape="[n, e]")
    for target in (q_box, k_box, v_box):
        arrow(ax, (x_box[2] + 0.04, x_y), (target[0] - 0.04, (target[1] + target[3]) / 2))

    # the score table: queries on the rows (i), keys on the columns (j)
    left, top = 3.75, 3.72
    scores = table(ax, left, top, CELL, SCORES, GREY, rows=TOKENS, cols=TOKENS,
                   row_colour=QUERY, col_colour=KEY)
    centre = (scores[0] + scores[2]) / 2
    note(ax, centre, scores[1] - 0.2, "scaled scores q_i · k_j / √d_k", weight="bold", fontsize=9.5)
    note(ax, centre, scores[1] - 0.45, "[n, n]: query i, key j", mono=True, fontsize=8.5)
    # queries reach the rows from the left, keys the columns from above
    arrow(ax, (q_box[2] + 0.04, 3.05), (left - 0.45, top - 1.5 * CELL), QUERY)
    path_arrow(ax, [(k_box[2] + 0.04, 4.2), (centre, 4.2), (centre, top + 0.27)], KEY)

    # softmax of each row -> the weights
    w_left = 6.05
    y_mid = top - 1.5 * CELL
    arrow(ax, (scores[2] + 0.08, y_mid), (w_left - 0.1, y_mid))
    note(ax, (scores[2] + w_left) / 2, y_mid + 0.1, "softmax\nof each\nrow", fontsize=8.5,
         va="bottom")
    weights = table(ax, w_left, top, CELL, WEIGHTS, OUTPUT, cols=TOKENS, col_colour=KEY)
    middle = (weights[0] + weights[2]) / 2
    note(ax, middle, weights[1] - 0.2, "weights w_ij", weight="bold", fontsize=9.5)
    note(ax, middle, weights[1] - 0.45, "[n, n], rows sum to 1", mono=True, fontsize=8.5)

    # weighted sum of the values, then the residual
    o_box = box(ax, 5.0, ROW, 1.15, 0.66, "outputs o_i", OUTPUT, shape="[n, e]")
    arrow(ax, (middle - 0.3, weights[1] - 0.6), (o_box[2] - 0.25, o_box[3] + 0.04))
    arrow(ax, (v_box[2] + 0.04, ROW), (o_box[0] - 0.04, ROW), VALUE)
    note(ax, (v_box[2] + o_box[0]) / 2, ROW + 0.08, "weighted sum\nof the values:\no_i = Σ_j w_ij v_j",
         fontsize=8.5, va="bottom")
    x_plus = 6.3
    plus(ax, x_plus, ROW)
    arrow(ax, (o_box[2] + 0.04, ROW), (x_plus - 0.18, ROW))
    path_arrow(ax, [(0.55, x_box[1] - 0.04), (0.55, 0.15), (x_plus, 0.15), (x_plus, ROW - 0.18)],
               INPUT)
    note(ax, 4.0, 0.28, "residual: add the input back", colour=INPUT, fontsize=8.5)
    out = box(ax, 7.2, ROW, 0.95, 0.66, "x_i + o_i", INPUT, shape="[n, e]")
    arrow(ax, (x_plus + 0.18, ROW), (out[0] - 0.04, ROW))
    return fig


if __name__ == "__main__":
    save(draw(), __file__, "mhsa-one-head")
