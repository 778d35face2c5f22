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


# the course's diagram colours (chapters/figures/diagram.py): input blue, query orange,
# key/value green, norms purple, output red
_BLUE, _ORANGE, _GREEN, _PURPLE, _RED, _GREY, _INK = (
    "#4C72B0", "#DD8452", "#55A868", "#8172B3", "#C44E52", "#8C8C8C", "#333333")


def _box(ax, cx, cy, w, h, text, colour, *, gid, fontsize=9, weight="bold"):
    """A rounded box centred at (cx, cy), tinted with ``colour``; returns its edges."""
    from matplotlib.colors import to_hex, to_rgb
    from matplotlib.patches import FancyBboxPatch

    tint = to_hex(tuple(0.82 + 0.18 * c for c in to_rgb(colour)))
    ax.add_patch(FancyBboxPatch((cx - w / 2, cy - h / 2), w, h, gid=gid,
                                boxstyle="round,pad=0,rounding_size=0.06", facecolor=tint,
                                edgecolor=colour, linewidth=1.4))
    ax.text(cx, cy, text, ha="center", va="center", fontsize=fontsize, fontweight=weight,
            color=_INK, linespacing=1.2)
    return cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2


def _arrow(ax, start, end, colour=_INK, *, gid=None):
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=11, linewidth=1.3,
                                 color=colour, shrinkA=0, shrinkB=0, gid=gid))


def plot_encoder_decoder(model, *, width: float = 7.8):
    """Draw an encoder-decoder's whole structure, read from the model object.

    Two columns, inputs at the top, logits at the bottom. Left: source ids, ``src_embed``
    (times ``sqrt(e)``) plus the sinusoidal positions, one box per encoder layer, the final
    LayerNorm when the stacks are pre-norm, and ``memory``, the *final* encoder output.
    Right: the target shifted right, ``tgt_embed`` plus positions, one block per decoder
    layer (``self_attn`` with the causal mask, ``cross_attn``, ``feed_forward``), the final
    LayerNorm when pre-norm, ``lm_head`` and the logits. One blue line carries ``memory``
    to the ``cross_attn`` of *every* decoder layer (as :class:`mhsa.Decoder` passes the same
    memory to each). The numbers of layers, the widths, the heads and the
    vocabulary sizes are the model's.

    The memory arrows carry the matplotlib ``gid`` ``"memory->decoder.layers.K.cross_attn"``
    and the layer boxes ``"encoder.layers.K"`` and ``"decoder.layers.K.<sublayer>"`` (code
    indexes from 0; the labels count from 1), so a test can find them.

    Args:
        model: an :class:`mhsa.EncoderDecoder`.
        width: figure width in inches (the height follows from the number of layers).

    Returns:
        The matplotlib Figure.

    Raises:
        TypeError: ``model`` is not an :class:`mhsa.EncoderDecoder`.

    Source: Vaswani et al. 2017, section 3.1 and Figure 1 (drawn there bottom to top).
    """
    from matplotlib.patches import Rectangle

    from mhsa.models.encoder_decoder import EncoderDecoder

    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"`model` must be an mhsa.EncoderDecoder, got {type(model).__name__}")
    n_enc, n_dec = len(model.encoder.layers), len(model.decoder.layers)
    attn = model.encoder.layers[0].self_attn
    e, heads = attn.embed_dim, attn.num_heads
    ff_dim = model.encoder.layers[0].feed_forward.linear1.out_features
    src_vocab = model.src_embed.embedding.num_embeddings
    tgt_vocab = model.lm_head.out_features
    pre_norm = model.encoder.norm is not None

    gap, h = 0.22, 0.4  # space between boxes; height of a one-line box
    fig = plt.figure()
    ax = fig.add_axes((0, 0, 1, 1))
    ax.axis("off")
    left, right, bw = width * 0.22, width * 0.64, width * 0.36
    norm = "pre-norm" if pre_norm else "post-norm, as in the paper"
    ax.text(width / 2, 0.0, f"encoder-decoder: {n_enc} encoder and {n_dec} decoder layers\n"
            f"embed_dim {e}, {heads} heads, ff_dim {ff_dim}, {norm}",
            ha="center", va="top", fontsize=9.5, fontweight="bold", color=_INK)

    def column(cx, y, items):
        """Boxes from ``y`` down, joined by arrows; ``items``: (text, colour, height, gid)."""
        edges = []
        for text, colour, box_h, gid in items:
            edges.append(_box(ax, cx, y - box_h / 2, bw, box_h, text, colour, gid=gid,
                              weight="normal" if gid.endswith("ids") else "bold"))
            if len(edges) > 1:
                _arrow(ax, (cx, edges[-2][1]), (cx, edges[-1][3]))
            y -= box_h + gap
        return edges

    top = -0.65
    enc = [(f"source ids [b, n_src]\n(source vocabulary {src_vocab})", _GREY, h + 0.1,
            "src ids"),
           ("src_embed × √e + positions", _BLUE, h, "src_embed")]
    enc += [(f"encoder layer {k + 1}\nself_attn, feed_forward", _GREEN, h + 0.2,
             f"encoder.layers.{k}") for k in range(n_enc)]
    if pre_norm:
        enc.append(("encoder.norm (LayerNorm)", _PURPLE, h, "encoder.norm"))
    enc.append(("memory [b, n_src, e]\nthe final encoder output", _BLUE, h + 0.2, "memory"))
    enc_edges = column(left, top, enc)

    dec_edges = column(right, top, [
        ("target shifted right [b, n_tgt]\n<bos> y1 y2 ...", _GREY, h + 0.1, "tgt ids"),
        ("tgt_embed × √e + positions", _BLUE, h, "tgt_embed")])
    above, y = dec_edges[-1][1], dec_edges[-1][1] - gap
    sub = [("self_attn (causal mask)", _ORANGE, "self_attn"),
           ("cross_attn (keys, values: memory)", _RED, "cross_attn"),
           ("feed_forward", _GREEN, "feed_forward")]
    cross_y = []
    for k in range(n_dec):  # a dashed frame per decoder layer around its three sublayers
        y_top = y
        _arrow(ax, (right, above), (right, y_top))
        ax.text(right + bw / 2 + 0.06, y_top - 0.04, f"decoder\nlayer {k + 1}", ha="left",
                va="top", fontsize=8.5, color=_INK)
        y -= 0.1
        for j, (text, colour, name) in enumerate(sub):
            edges = _box(ax, right, y - 0.18, bw * 0.92, 0.36, text, colour,
                         gid=f"decoder.layers.{k}.{name}", fontsize=8.5)
            if name == "cross_attn":
                cross_y.append(y - 0.18)
            if j:
                _arrow(ax, (right, y + 0.1), (right, edges[3]))
            y -= 0.36 + 0.1
        ax.add_patch(Rectangle((right - bw / 2, y), bw, y_top - y, fill=False,
                               edgecolor=_GREY, linewidth=1.0, linestyle="--"))
        above, y = y, y - gap
    tail = [("decoder.norm (LayerNorm)", _PURPLE, h, "decoder.norm")] if pre_norm else []
    tail += [(f"lm_head: Linear({e} → {tgt_vocab})", _RED, h, "lm_head"),
             (f"logits [b, n_tgt, {tgt_vocab}]\nnext-token scores", _GREY, h + 0.1, "logits")]
    tail_edges = column(right, y, tail)
    _arrow(ax, (right, above), (right, tail_edges[0][3]))

    # memory, the last encoder output, feeds the cross-attention of every decoder layer
    memory = enc_edges[-1]
    bus_x = (memory[2] + right - bw * 0.46) / 2
    memory_y = (memory[1] + memory[3]) / 2
    ax.plot([memory[2], bus_x], [memory_y, memory_y], color=_BLUE, linewidth=1.6)
    ax.plot([bus_x, bus_x], [min(memory_y, *cross_y), max(memory_y, *cross_y)], color=_BLUE,
            linewidth=1.6)
    for k, cy in enumerate(cross_y):
        _arrow(ax, (bus_x, cy), (right - bw * 0.46, cy), _BLUE,
               gid=f"memory->decoder.layers.{k}.cross_attn")
    ax.text(left, memory[1] - 0.12, "memory feeds the cross_attn\nof every decoder layer",
            ha="center", va="top", fontsize=8.5, color=_BLUE)
    bottom = min(tail_edges[-1][1], memory[1] - 0.6) - 0.15
    ax.set_xlim(0, width)
    ax.set_ylim(bottom, 0.15)
    fig.set_size_inches(width, 0.15 - bottom)
    return fig
