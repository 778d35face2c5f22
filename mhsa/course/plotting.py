"""Figures for attention tables: queries on the rows, keys on the columns.

Kept apart from the math: nothing in the attention code imports this module. Static figures use
matplotlib; :func:`head_view`, the interactive view of the online book, uses plotly (the optional
``viz`` extra), imported only when it is called.
"""

import hashlib
import json

import matplotlib.pyplot as plt
import numpy as np
import torch

from mhsa.course._head_view_page import page

COLORBAR_LABEL = "attention weight"  # what the colour bar says unless told otherwise


def plot_attention(
    table,
    query_tokens,
    key_tokens,
    *,
    title: str,
    ax=None,
    fmt: str = ".2f",
    cmap: str = "viridis",
    colorbar_label: str = COLORBAR_LABEL,
    annotate: bool = True,
    fontsize: float = 8,
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
        colorbar_label: label of the colour bar; say what the colours are when they are not
            attention weights (``"score"``, ``"scaled score"``).
        annotate: write each value in its cell.
        fontsize: font size of those values, in points; raise it when the figure is shown smaller
            than it is drawn (a wide figure on a narrow page).
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
            ax.text(j, i, format(v, fmt), ha="center", va="center", color=colour, fontsize=fontsize)
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
        fig.colorbar(axes.flat[0].images[0], ax=axes,
                     label=kwargs.get("colorbar_label", COLORBAR_LABEL),
                     shrink=0.8)
    return fig


class HeadView:
    """What :func:`head_view` returns: shows itself as HTML in a notebook and on a book page.

    Attributes:
        html: the view's HTML (menus, plot container, status line and script).
        figure: the plotly ``Figure`` of the first view, e.g. for ``figure.show()`` in Jupyter.
    """

    def __init__(self, html: str, figure):
        self.html = html
        self.figure = figure

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"HeadView({self.figure.layout.title.text!r})"


def _as_array(weights) -> np.ndarray:
    """Float64, so that rounded weights print as short decimals (0.005, not 0.004999999888)."""
    if torch.is_tensor(weights):
        return weights.detach().cpu().double().numpy()
    return np.asarray(weights, dtype=np.float64)


def head_view(
    weights,
    query_tokens,
    key_tokens=None,
    *,
    title: str = "attention weights",
    layer_labels=None,
    layer: int = 0,
    head: int = 0,
    row: int = 0,
    decimals: int = 3,
):
    """An interactive view of recorded attention weights: pick a layer and a head, hover a row.

    The reader picks a layer and a head from two menus; the heatmap (queries on the rows, keys on the
    columns) shows that head's weights, and the bar chart under it shows one query's row: where that
    token attends. Hovering over a row selects its query; a click holds a row (so the pointer can move
    to the bars) until the next click. Everything runs in the page's
    browser, without a kernel, on the global ``Plotly`` of the page: the book loads plotly.js from its
    own ``_static`` folder (``chapters/_ext/plotly_js.py``). Inspired by bertviz's head view
    (Vig, 2019, "A multiscale visualization of attention in the Transformer model", section 3.1).

    Args:
        weights: ``[layers, heads, n_q, n_k]`` tensor or array of attention weights (one batch item),
            e.g. ``torch.stack`` of each layer's ``[heads, n_q, n_k]`` recorded weights.
        query_tokens: ``n_q`` labels of the rows (queries).
        key_tokens: ``n_k`` labels of the columns (keys); ``query_tokens`` when ``None``
            (self-attention). Pass the source tokens for cross-attention.
        title: what the weights are; the view adds ``": layer L, head H"``.
        layer_labels: one label per layer, shown in the layer menu and the title; ``"layer 1"`` ...
            ``"layer L"`` when ``None``. Number them from 1, as the course does
            (``"decoder layer 1"``, not ``"decoder.layers.0"``).
            Heads are labelled ``"head 0"`` ... as in :func:`plot_heads`.
        layer, head, row: what is shown first (indices from 0).
        decimals: weights are rounded to this many decimals in the page (3 keeps it small).

    Returns:
        A ``HeadView``; the last expression of a notebook cell displays it.

    Raises:
        ImportError: plotly is not installed (``pip install "mhsa[viz]"``).
        ValueError: ``weights`` is not 4-D, the label counts do not match its shape, or ``layer``,
            ``head`` or ``row`` is out of range.
        TypeError: ``layer``, ``head``, ``row`` or ``decimals`` is not an int.
    """
    values = _as_array(weights)
    if values.ndim != 4:
        raise ValueError(f"`weights` must be 4-D [layers, heads, n_q, n_k], got shape {values.shape}"
                         "; for one layer's [heads, n_q, n_k] pass weights[None]")
    key_tokens = query_tokens if key_tokens is None else key_tokens
    n_layers, n_heads, n_q, n_k = values.shape
    if (len(query_tokens), len(key_tokens)) != (n_q, n_k):
        raise ValueError(f"`weights` has shape {values.shape} but got {len(query_tokens)} query "
                         f"tokens and {len(key_tokens)} key tokens")
    layer_labels = [f"layer {k + 1}" for k in range(n_layers)] if layer_labels is None \
        else list(layer_labels)
    if len(layer_labels) != n_layers:
        raise ValueError(f"`layer_labels` has {len(layer_labels)} labels for {n_layers} layers")
    for name, value, size in (("layer", layer, n_layers), ("head", head, n_heads),
                              ("row", row, n_q), ("decimals", decimals, 7)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"`{name}` must be an int, got {type(value).__name__}")
        if not 0 <= value < size + (name == "decimals"):
            raise ValueError(f"`{name}` must be in [0, {size - (name != 'decimals')}], got {value}")
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError as error:
        raise ImportError('head_view needs plotly: pip install "mhsa[viz]"') from error

    rounded = np.round(values, decimals) + 0.0  # + 0.0: no -0.0 in the page
    queries, keys = [str(t) for t in query_tokens], [str(t) for t in key_tokens]
    head_labels = [f"head {k}" for k in range(n_heads)]
    figure = _figure(go, make_subplots, rounded[layer, head], queries, keys, row,
                     f"{title}: {layer_labels[layer]}, {head_labels[head]}")
    view = {"weights": rounded.tolist(), "queries": queries, "keys": keys, "title": title,
            "layer": layer, "head": head, "row": row}
    digest = hashlib.sha1(json.dumps([title, view["weights"], queries, keys]).encode()).hexdigest()
    height = int(figure.layout.height)
    html = page(f"mhsa-head-view-{digest[:12]}", figure.to_json(), view, layer_labels,
                head_labels, height)
    return HeadView(html, figure)


def _figure(go, make_subplots, table, queries, keys, row, title):
    """The plotly figure of one head: weights above, one query's row below (keys share the x axis)."""
    n_q, n_k = table.shape
    heat_height = 40 + 26 * n_q
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                           row_heights=[heat_height, 200])
    pairs = [[f"query {q!r} → key {k!r}" for k in keys] for q in queries]
    figure.add_trace(go.Heatmap(
        z=table.tolist(), x=list(range(n_k)), y=list(range(n_q)), zmin=0, zmax=1,
        colorscale="Viridis", text=pairs, hovertemplate="%{text}<br>weight %{z:.3f}<extra></extra>",
        colorbar={"title": {"text": COLORBAR_LABEL, "side": "right"}, "len": 0.7, "y": 0.62}),
        row=1, col=1)
    figure.add_trace(go.Bar(
        x=list(range(n_k)), y=table[row].tolist(), marker_color="#4C72B0",
        text=keys, hovertemplate="key %{text}<br>weight %{y:.3f}<extra></extra>",
        textposition="none"), row=2, col=1)
    ticks = {"tickmode": "array", "tickvals": list(range(n_k)), "ticktext": keys}
    figure.update_xaxes(**ticks, tickangle=-45, row=2, col=1, title_text="keys (j)")
    figure.update_xaxes(**ticks, showticklabels=True, tickangle=-45, side="top", row=1, col=1)
    figure.update_yaxes(tickmode="array", tickvals=list(range(n_q)), ticktext=queries,
                        autorange="reversed", title_text="queries (i)", row=1, col=1)
    figure.update_yaxes(range=[0, 1], title_text=f"row of {queries[row]!r}", row=2, col=1)
    figure.update_layout(
        title={"text": title, "x": 0, "xanchor": "left"}, template="plotly_white",
        height=heat_height + 200 + 190, margin={"l": 90, "r": 20, "t": 110, "b": 90},
        showlegend=False, hovermode="closest",
        shapes=[{"type": "rect", "xref": "x", "yref": "y", "x0": -0.5, "x1": n_k - 0.5,
                 "y0": row - 0.5, "y1": row + 0.5, "line": {"color": "#C44E52", "width": 2}}])
    return figure
