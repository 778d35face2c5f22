"""Draw chapter 9's KV cache: at each decoding step, what is computed new and what is reused.

Step t projects only the newest token (its query, key and value, ``[b, h, 1, d]``), appends the key and
value to the cache, and attends with one query over all t cached keys and values. Run with the course's
Python: ``python chapters/figures/make_kv_cache.py``; it rewrites ``kv_cache.svg`` next to this file,
byte-for-byte reproducibly. Legend: b batch, h heads, d head_dim, t tokens so far, j key positions.
"""

from diagram import INK, KEY, OUTPUT, QUERY, VALUE, new_figure, note, save, tint
from matplotlib.patches import Rectangle

WIDTH, HEIGHT = 7.8, 4.6
TOKENS = ["They", "stoned", "the", "witch"]
WEIGHTS = [[1.0], [0.3, 0.7], [0.2, 0.5, 0.3], [0.1, 0.4, 0.3, 0.2]]  # for the picture: rows sum to 1
CELL = 0.36
ROW_STEP = 0.78
COLUMNS = {"new": 1.15, "keys": 2.75, "values": 4.5, "weights": 6.2}  # left edges
TOP = HEIGHT - 0.95  # the first step's row (its centre)


def cell(ax, x, y, colour, text, *, new):
    """One vector: full colour and a dark outline when computed this step, light when reused."""
    ax.add_patch(Rectangle((x, y - CELL / 2), CELL, CELL,
                           facecolor=tint(colour, 0.75 if new else 0.18),
                           edgecolor=INK if new else tint(colour, 0.6),
                           linewidth=1.6 if new else 0.9))
    note(ax, x + CELL / 2, y, text, fontsize=8.5, colour="white" if new else INK,
         weight="bold" if new else "normal")


def draw():
    fig, ax = new_figure(WIDTH, HEIGHT)
    headers = [("new", "computed this step\nfrom the newest token"),
               ("keys", "key cache\n[b, h, t, d]"), ("values", "value cache\n[b, h, t, d]"),
               ("weights", "weights of the\nnew query [1, t]")]
    for name, text in headers:
        note(ax, COLUMNS[name] + (0.55 if name == "new" else 2 * CELL), HEIGHT - 0.3, text,
             fontsize=8.5, weight="bold")
    for t, token in enumerate(TOKENS, start=1):
        y = TOP - (t - 1) * ROW_STEP
        note(ax, 0.1, y + 0.1, f"step {t}", ha="left", weight="bold", fontsize=9)
        note(ax, 0.1, y - 0.14, f'"{token}"', ha="left", fontsize=8.5)
        for k, (colour, name) in enumerate(((QUERY, "q"), (KEY, "k"), (VALUE, "v"))):
            cell(ax, COLUMNS["new"] + k * (CELL + 0.04), y, colour, f"{name}{t}", new=True)
        for j in range(1, t + 1):
            x = (j - 1) * CELL
            cell(ax, COLUMNS["keys"] + x, y, KEY, f"k{j}", new=j == t)
            cell(ax, COLUMNS["values"] + x, y, VALUE, f"v{j}", new=j == t)
            weight = WEIGHTS[t - 1][j - 1]
            ax.add_patch(Rectangle((COLUMNS["weights"] + x, y - CELL / 2), CELL, CELL,
                                   facecolor=tint(OUTPUT, 0.15 + 0.75 * weight), edgecolor=INK,
                                   linewidth=1.6))
            note(ax, COLUMNS["weights"] + x + CELL / 2, y, f"{weight:.1f}", fontsize=8,
                 colour="white" if weight > 0.5 else INK)
    bottom = TOP - 3 * ROW_STEP - 0.5
    x = 0.1
    for new, text in ((True, "computed this step"), (False, "read from the cache, not recomputed")):
        ax.add_patch(Rectangle((x, bottom - 0.09), 0.18, 0.18,
                               facecolor=tint(KEY, 0.75 if new else 0.18),
                               edgecolor=INK if new else tint(KEY, 0.6),
                               linewidth=1.4 if new else 0.9))
        note(ax, x + 0.26, bottom, text, ha="left", fontsize=8.5)
        x += 2.0
    note(ax, 0.1, bottom - 0.38,
         "Each step projects one token: q, k, v are [b, h, 1, d]. The new key and value are appended; "
         "the\nquery attends over all t of them. Without the cache, step t would recompute k and v "
         "for all t tokens.", ha="left", va="top", fontsize=8.5, align="left")
    return fig


if __name__ == "__main__":
    save(draw(), __file__, "mhsa-kv-cache")
