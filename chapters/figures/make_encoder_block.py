"""Draw chapter 5's encoder block, post-norm (the paper) and pre-norm side by side.

The boxes carry the attribute names of ``mhsa.EncoderLayer`` (``self_attn``, ``dropout1``,
``norm1``, ``feed_forward``, ``dropout2``, ``norm2``), in the order its forward calls them. Run with the
course's Python: ``python chapters/figures/make_encoder_block.py``; it rewrites ``encoder_block.svg``
next to this file, byte-for-byte reproducibly. Legend: b batch, n tokens, e embed_dim.
"""

from diagram import GREEN, GREY, INPUT, PURPLE, QUERY, new_figure, note, save, stack

WIDTH, HEIGHT = 7.8, 6.95
ATTN, FF, NORM, DROP = ("box", "self_attn (multi-head)", QUERY), ("box", "feed_forward", GREEN), \
    PURPLE, GREY
POST_NORM = [("text", "x [b, n, e]"), ATTN, ("box", "dropout1", DROP), ("plus", 1),
             ("box", "norm1 (layer norm)", NORM), FF, ("box", "dropout2", DROP), ("plus", 5),
             ("box", "norm2 (layer norm)", NORM), ("text", "out [b, n, e]")]
PRE_NORM = [("text", "x [b, n, e]"), ("box", "norm1 (layer norm)", NORM), ATTN,
            ("box", "dropout1", DROP), ("plus", 1), ("box", "norm2 (layer norm)", NORM), FF,
            ("box", "dropout2", DROP), ("plus", 5), ("text", "out [b, n, e]")]
COLUMNS = [
    (1.75, "post-norm (the paper; norm_first=False)", POST_NORM,
     "x = norm1(x + dropout1(self_attn(x)))\nx = norm2(x + dropout2(feed_forward(x)))"),
    (5.55, "pre-norm (norm_first=True)", PRE_NORM,
     "x = x + dropout1(self_attn(norm1(x)))\nx = x + dropout2(feed_forward(norm2(x)))"),
]


def draw():
    fig, ax = new_figure(WIDTH, HEIGHT)
    for cx, title, items, code in COLUMNS:
        note(ax, cx + 0.35, HEIGHT - 0.2, title, weight="bold", fontsize=10.5)
        note(ax, cx + 0.35, HEIGHT - 0.6, code, mono=True, fontsize=9.5, align="left")
        stack(ax, cx, HEIGHT - 1.1, items, step=0.57, box_h=0.33)
    note(ax, 1.75 + 0.35, 0.25, "the sum is normed after every add", fontsize=9, colour=INPUT)
    note(ax, 5.55 + 0.35, 0.25, "the layer leaves the stream un-normed;\n"
         "the stack ends with one more LayerNorm", fontsize=9, colour=INPUT)
    ax.plot([3.85, 3.85], [0.1, HEIGHT - 0.1], color="#DDDDDD", linewidth=1)
    return fig


if __name__ == "__main__":
    save(draw(), __file__, "mhsa-encoder-block")
