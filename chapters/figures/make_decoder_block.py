"""Draw chapter 6's decoder block: masked self-attention, cross-attention reading ``memory``, feed-forward.

Post-norm, as in the paper and ``mhsa.DecoderLayer(norm_first=False)``; the boxes carry its attribute
names. Run with the course's Python: ``python chapters/figures/make_decoder_block.py``; it rewrites
``decoder_block.svg`` next to this file, byte-for-byte reproducibly. Legend: b batch, e embed_dim,
n_tgt target tokens (queries), n_src source tokens (the encoder's output, ``memory``), i/j query/key.
"""

from diagram import (
    BLUE,
    GREEN,
    GREY,
    INK,
    KEY,
    PURPLE,
    QUERY,
    RED,
    arrow,
    box,
    new_figure,
    note,
    save,
    stack,
    table,
)

WIDTH, HEIGHT = 7.8, 7.6
CX = 2.75  # the block's spine
ITEMS = [("text", "x [b, n_tgt, e]"), ("box", "self_attn (causal mask)", QUERY), ("plus", 1),
         ("box", "norm1 (layer norm)", PURPLE), ("box", "cross_attn", RED), ("plus", 4),
         ("box", "norm2 (layer norm)", PURPLE), ("box", "feed_forward", GREEN), ("plus", 7),
         ("box", "norm3 (layer norm)", PURPLE), ("text", "out [b, n_tgt, e]")]
CODE = ("x = norm1(x + dropout1(self_attn(x, causal)))\n"
        "x = norm2(x + dropout2(cross_attn(query=x, key=value=memory)))\n"
        "x = norm3(x + dropout3(feed_forward(x)))")
# chapter 6's example pair (its "decoder reads" line): 4 source digits, 5 decoder inputs, so the
# cross-attention table is 5 x 4, not square
SOURCE = ["3", "6", "2", "4"]  # chapter 6's task: reverse the digits
TARGET = ["<bos>", "4", "2", "6", "3"]
LABEL = 9.5  # font size of the labels: about 11 px at the book's ~690 px column


def draw():
    fig, ax = new_figure(WIDTH, HEIGHT)
    note(ax, WIDTH / 2, HEIGHT - 0.2, "decoder block (post-norm, as in the paper)", weight="bold",
         fontsize=10.5)
    note(ax, WIDTH / 2, HEIGHT - 0.72, CODE, mono=True, fontsize=LABEL, align="left")
    ys = stack(ax, CX, HEIGHT - 1.45, ITEMS, step=0.58, box_w=2.05, box_h=0.36, fontsize=10)
    note(ax, CX + 1.2, ys[-1], "dropout1-3 after each sublayer,\nas in the encoder, not drawn",
         fontsize=LABEL, ha="left", colour=GREY)

    # memory: the encoder's output gives the cross-attention its keys and values
    y_cross = ys[4]
    memory = box(ax, 0.72, y_cross + 0.95, 1.32, 0.78, "memory", BLUE,
                 shape="[b, n_src, e]\nencoder output")
    arrow(ax, (0.72, memory[1] - 0.03), (CX - 1.03 - 0.03, y_cross), BLUE, style="arc3,rad=0.25")
    note(ax, 1.05, y_cross + 0.1, "key,\nvalue", fontsize=10, colour=KEY, ha="right")
    note(ax, CX - 0.1, (ys[3] + y_cross) / 2 - 0.02, "query", fontsize=10, colour=QUERY, ha="right")

    # the two tables of allowed pairs: True = may attend
    left, cell = 5.5, 0.36
    n_tgt, n_src = len(TARGET), len(SOURCE)
    causal = [[0.6 if j <= i else None for j in range(n_tgt)] for i in range(n_tgt)]
    grid = table(ax, left, HEIGHT - 1.35, cell, causal, QUERY, rows=TARGET, cols=TARGET,
                 fontsize=LABEL)
    note(ax, (grid[0] + grid[2]) / 2, grid[1] - 0.08,
         "causal mask [n_tgt, n_tgt]:\nquery i may attend\nto keys j ≤ i", fontsize=LABEL, va="top")
    full = [[0.6] * n_src for _ in range(n_tgt)]
    grid = table(ax, left, HEIGHT - 4.15, cell, full, RED, rows=TARGET, cols=SOURCE, fontsize=LABEL)
    note(ax, (grid[0] + grid[2]) / 2, grid[1] - 0.08,
         f"cross-attention [n_tgt, n_src]\n= [{n_tgt}, {n_src}], not square:\nevery target token "
         "may\nattend to all of memory", fontsize=LABEL, va="top")
    note(ax, (grid[0] + grid[2]) / 2, grid[1] - 0.98, "shaded = may attend (True)", fontsize=LABEL,
         colour=INK)
    return fig


if __name__ == "__main__":
    save(draw(), __file__, "mhsa-decoder-block")
