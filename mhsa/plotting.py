"""Figures for attention tables: queries on the rows, keys on the columns.

Kept apart from the math: nothing in the attention code imports this module.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch


def plot_attention(
    table,
    query_tokens,
    key_tokens,
    *,
    title: str,
    ax=None,
    fmt: str = ".2f",
    cmap: str = "viridis",
    colorbar_label: str = "",
    annotate: bool = True,
    vmin=None,
    vmax=None,
    colorbar: bool = True,
):
    """Draw one attention table as a labelled heatmap.

    Args:
        table: ``[n_q, n_k]`` tensor or array (scores, weights, or any per-pair value).
        query_tokens: ``n_q`` labels for the rows (queries).
        key_tokens: ``n_k`` labels for the columns (keys).
        title: what the table is, e.g. ``"layer 1, head 3: attention weights"``.
        ax: matplotlib Axes to draw on; a new figure when ``None``.
        fmt: format of the numbers written in the cells.
        cmap: matplotlib colour map.
        colorbar_label: label of the colour bar.
        annotate: write each value in its cell.
        vmin, vmax: colour range; the table's own range when ``None``.
        colorbar: draw a colour bar next to the table.

    Returns:
        The matplotlib Axes.

    Raises:
        ValueError: ``table`` is not 2-D or the label counts do not match its shape.
    """
    values = table.detach().cpu().float().numpy() if torch.is_tensor(table) else np.asarray(table)
    if values.ndim != 2:
        raise ValueError(f"`table` must be 2-D [n_q, n_k], got shape {values.shape}")
    if values.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(
            f"`table` has shape {values.shape} but got {len(query_tokens)} query tokens "
            f"and {len(key_tokens)} key tokens"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.7 * len(key_tokens), 0.8 + 0.6 * len(query_tokens)))
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label=colorbar_label, fraction=0.046, pad=0.04)
    ax.set_xticks(range(len(key_tokens)), labels=list(key_tokens), rotation=45, ha="right")
    ax.set_yticks(range(len(query_tokens)), labels=list(query_tokens))
    ax.set_xlabel("keys (j)")
    ax.set_ylabel("queries (i)")
    ax.set_title(title)
    if annotate:
        low = np.nanmin(values) if vmin is None else vmin
        high = np.nanmax(values) if vmax is None else vmax
        middle = (low + high) / 2
        for (i, j), v in np.ndenumerate(values):
            colour = "black" if v > middle else "white"
            if cmap in ("Greys", "gray_r"):
                colour = "white" if v > middle else "black"
            ax.text(j, i, format(v, fmt), ha="center", va="center", color=colour, fontsize=8)
    return ax


def plot_heads(weights, query_tokens, key_tokens, *, title: str, ncols: int = 4, **kwargs):
    """Draw one attention table per head, side by side.

    When both ``vmin`` and ``vmax`` are given, every panel uses that one colour scale and the
    figure gets a single colour bar; otherwise each panel has its own scale and bar.

    Args:
        weights: ``[h, n_q, n_k]`` tensor of attention weights (one batch item).
        query_tokens, key_tokens: row and column labels.
        title: figure title; each panel is titled ``"{title}, head k"``.
        ncols: panels per row.
        **kwargs: passed to :func:`plot_attention`.

    Returns:
        The matplotlib Figure (constrained layout: resize it with ``set_size_inches``, no
        ``tight_layout`` needed).

    Raises:
        ValueError: ``weights`` is not 3-D.
    """
    if weights.dim() != 3:
        raise ValueError(f"`weights` must be [h, n_q, n_k], got shape {tuple(weights.shape)}")
    n_heads = weights.shape[0]
    ncols = min(ncols, n_heads)
    nrows = -(-n_heads // ncols)
    size = 1.2 + 0.55 * len(key_tokens)
    shared = kwargs.get("vmin") is not None and kwargs.get("vmax") is not None
    fig, axes = plt.subplots(nrows, ncols, figsize=(ncols * size, nrows * size), squeeze=False,
                             layout="constrained")
    for head, ax in enumerate(axes.flat):
        if head < n_heads:
            plot_attention(weights[head], query_tokens, key_tokens,
                           title=f"{title}, head {head}", ax=ax, colorbar=not shared, **kwargs)
        else:
            ax.axis("off")
    if shared:  # one scale for all panels: one colour bar for the figure
        fig.colorbar(axes.flat[0].images[0], ax=axes, label=kwargs.get("colorbar_label", ""),
                     shrink=0.8)
    return fig
