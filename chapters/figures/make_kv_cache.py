"""Draw chapter 9's KV cache: at each decoding step, what is computed new and what is reused.

Step t projects only the newest token (its query, key and value, ``[b, h, 1, d]``), appends the key
and value to the cache, and attends with one query over all t cached keys and values. Decoding starts
from ``<bos>``, as chapter 6's decoder does. Positions count from 0, as in the preface: step t
reads token t - 1, whose vectors are q, k, v with index t - 1. Run with the course's Python:
``python chapters/figures/make_kv_cache.py``; it rewrites ``kv_cache.svg`` next to this file,
byte-for-byte reproducibly. Legend: b batch, h heads, d head_dim, t tokens so far, j key positions.
"""

from diagram import INK, KEY, OUTPUT, QUERY, VALUE, new_figure, note, save, tint
from matplotlib.patches import Rectangle

WIDTH, HEIGHT = 8.0, 5.3
TOKENS = ["<bos>", "They", "stoned", "the"]  # what the decoder reads at each step
WEIGHTS = [[1.0], [0.3, 0.7], [0.2, 0.5, 0.3], [0.1, 0.4, 0.3, 0.2]]  # for the picture: rows sum to 1
CELL = 0.37
ROW_STEP = 0.8
COLUMNS = {"new": 0.95, "keys": 2.45, "values": 4.4, "weights": 6.35}  # left edges, 0.3+ apart
TOP = HEIGHT - 1.0  # the first step's row (its centre)
LABEL = 9.5  # font size of the labels: about 11 px at the book's ~690 px column


def cell(ax, x, y, colour, text, *, new, size=CELL):
    """One vector: full colour and a dark outline when computed this step, light when reused."""
    ax.add_patch(Rectangle((x, y - size / 2), size, size,
                           facecolor=tint(colour, 0.75 if new else 0.18),
                           edgecolor=INK if new else tint(colour, 0.6),
                           linewidth=1.6 if new else 0.9))
    if text:
        note(ax, x + size / 2, y, text, fontsize=LABEL, colour="white" if new else INK,
             weight="bold" if new else "normal")


def weight_cell(ax, x, y, weight, *, text=True, size=CELL):
    """One attention weight: the darker the red, the larger the weight."""
    ax.add_patch(Rectangle((x, y - size / 2), size, size,
                           facecolor=tint(OUTPUT, 0.15 + 0.75 * weight), edgecolor=INK,
                           linewidth=1.6))
    if text:
        note(ax, x + size / 2, y, f"{weight:.1f}", fontsize=9,
             colour="white" if weight > 0.5 else INK)


def draw():
    fig, ax = new_figure(WIDTH, HEIGHT)
    headers = [("new", "computed this step\nfrom the newest token"),
               ("keys", "key cache\n[b, h, t, d]"), ("values", "value cache\n[b, h, t, d]"),
               ("weights", "weights of the\nnew query [1, t]")]
    for name, text in headers:
        note(ax, COLUMNS[name] + (0.62 if name == "new" else 2 * CELL), HEIGHT - 0.32, text,
             fontsize=LABEL, weight="bold")
    for t, token in enumerate(TOKENS, start=1):
        y = TOP - (t - 1) * ROW_STEP
        note(ax, 0.1, y + 0.11, f"step {t}", ha="left", weight="bold", fontsize=10)
        note(ax, 0.1, y - 0.15, f'"{token}"', ha="left", fontsize=LABEL)
        for k, (colour, name) in enumerate(((QUERY, "q"), (KEY, "k"), (VALUE, "v"))):
            cell(ax, COLUMNS["new"] + k * (CELL + 0.04), y, colour, f"{name}{t - 1}",
                 new=True)
        for j in range(t):  # key positions 0 .. t - 1, the newest last
            x = j * CELL
            cell(ax, COLUMNS["keys"] + x, y, KEY, f"k{j}", new=j == t - 1)
            cell(ax, COLUMNS["values"] + x, y, VALUE, f"v{j}", new=j == t - 1)
            weight_cell(ax, COLUMNS["weights"] + x, y, WEIGHTS[t - 1][j])

    # the legend: every shading of the figure
    small = 0.2
    first = TOP - 3 * ROW_STEP - 0.55
    x = 0.1
    for colour in (QUERY, KEY, VALUE):
        cell(ax, x, first, colour, "", new=True, size=small)
        x += small + 0.04
    note(ax, x + 0.06, first, "computed this step (q, k, v)", ha="left", fontsize=LABEL)
    x = 3.6
    for colour in (KEY, VALUE):
        cell(ax, x, first, colour, "", new=False, size=small)
        x += small + 0.04
    note(ax, x + 0.06, first, "read from the cache, not recomputed (k, v)", ha="left",
         fontsize=LABEL)
    second = first - 0.34
    x = 0.1
    for weight in (0.1, 0.5, 0.9):
        weight_cell(ax, x, second, weight, text=False, size=small)
        x += small + 0.04
    note(ax, x + 0.06, second,
         "attention weight: the darker the red, the larger (each row sums to 1)", ha="left",
         fontsize=LABEL)
    note(ax, 0.1, second - 0.3,
         "Each step projects one token, the one it reads: q, k, v are [b, h, 1, d]. The new key "
         "and value\nare appended, and the query attends over all t of them. Without the cache, "
         "step t would\nrecompute k and v for all t tokens.", ha="left", va="top", fontsize=LABEL,
         align="left")
    return fig


if __name__ == "__main__":
    save(draw(), __file__, "mhsa-kv-cache")
