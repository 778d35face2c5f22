"""The attention-table figures: plot_attention, plot_heads and the interactive head view."""

import json
import re
import subprocess
import sys

import matplotlib
import pytest
import torch

import mhsa
from mhsa.course.plotting import head_view, plot_attention, plot_encoder_decoder, plot_heads

from tolerances import rounded_to

matplotlib.use("Agg")


def test_plot_attention_labels_rows_with_queries_and_columns_with_keys():
    table = torch.tensor([[0.1, 0.9], [0.5, 0.5], [1.0, 0.0]])
    ax = plot_attention(table, ["a", "b", "c"], ["x", "y"], title="layer 0, head 1")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y"]
    assert ax.get_title() == "layer 0, head 1"
    assert [t.get_text() for t in ax.texts] == ["0.10", "0.90", "0.50", "0.50", "1.00", "0.00"]
    assert len(ax.figure.axes) == 2  # the heatmap and its colour bar
    matplotlib.pyplot.close(ax.figure)


def test_plot_attention_refuses_mismatched_labels():
    with pytest.raises(ValueError, match=r"shape \(2, 2\) but got 3 query tokens and 2 key tokens"):
        plot_attention(torch.zeros(2, 2), ["a", "b", "c"], ["x", "y"], title="t")
    with pytest.raises(ValueError, match=r"must be 2-D \[n_q, n_k\], got shape \(2,\)"):
        plot_attention(torch.zeros(2), ["a", "b"], ["x"], title="t")


def test_plot_heads_draws_one_panel_per_head():
    fig = plot_heads(torch.rand(3, 2, 2), ["a", "b"], ["a", "b"], title="layer 0", ncols=2)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["layer 0, head 0", "layer 0, head 1", "layer 0, head 2"]
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match=r"\[h, n_q, n_k\]"):
        plot_heads(torch.rand(2, 2), ["a", "b"], ["a", "b"], title="t")


def test_plot_heads_shares_one_colour_bar_when_the_scale_is_fixed():
    def colour_bars(fig):
        return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]

    weights = torch.rand(4, 2, 2)
    own_scales = plot_heads(weights, ["a", "b"], ["a", "b"], title="t")
    one_scale = plot_heads(weights, ["a", "b"], ["a", "b"], title="t", vmin=0, vmax=1,
                           colorbar_label="attention weight")
    assert len(colour_bars(own_scales)) == 4
    assert len(colour_bars(one_scale)) == 1
    assert colour_bars(one_scale)[0].get_ylabel() == "attention weight"
    matplotlib.pyplot.close("all")


def test_every_colour_bar_is_labelled_attention_weight_unless_told_otherwise():
    ax = plot_attention(torch.rand(2, 2), ["a", "b"], ["a", "b"], title="t")
    assert ax.figure.axes[1].get_ylabel() == "attention weight"
    ax = plot_attention(torch.rand(2, 2), ["a", "b"], ["a", "b"], title="t", colorbar_label="score")
    assert ax.figure.axes[1].get_ylabel() == "score"
    fig = plot_heads(torch.rand(2, 2, 2), ["a", "b"], ["a", "b"], title="t", vmin=0, vmax=1)
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>"] == ["attention weight"]
    matplotlib.pyplot.close("all")


def view_data(view):
    """The JSON the head view's script reads, parsed back from its HTML."""
    match = re.search(r"const view = (\{.*?\});\n", view.html)
    return json.loads(match[1].replace("<\\/", "</"))


def test_head_view_embeds_every_layer_and_head_and_one_menu_each():
    weights = torch.rand(2, 3, 4, 5).softmax(dim=-1)  # [layers, heads, n_q, n_k]
    view = head_view(weights, list("abcd"), list("vwxyz"), title="cross", layer=1, head=2, row=3)
    data = view_data(view)
    assert torch.allclose(torch.tensor(data["weights"]), weights, **rounded_to(3))  # 3 decimals
    assert (data["queries"], data["keys"]) == (list("abcd"), list("vwxyz"))
    assert (data["layer"], data["head"], data["row"]) == (1, 2, 3)
    assert re.findall(r'<option value="\d+"( selected)?>(layer \d)', view.html) == [
        ("", "layer 1"), (" selected", "layer 2")]
    assert len(re.findall(r"<option value=\"\d+\"[^>]*>head \d", view.html)) == 3
    assert view.figure.layout.title.text == "cross: layer 2, head 2"
    heatmap, bars = view.figure.data
    assert torch.allclose(torch.tensor(heatmap.z), weights[1, 2], **rounded_to(3))
    assert torch.allclose(torch.tensor(bars.y), weights[1, 2, 3], **rounded_to(3))
    assert view._repr_html_() == view.html
    assert re.search(r"\d\.\d{4}", json.dumps(data["weights"])) is None  # 3 decimals, no more
    assert "<script src" not in view.html and "cdn" not in view.html.lower()  # the book serves plotly.js


def test_head_view_is_deterministic_and_defaults_keys_to_queries():
    weights = torch.rand(1, 2, 3, 3)
    first, second = head_view(weights, ["x", "y", "x"]), head_view(weights, ["x", "y", "x"])
    assert first.html == second.html  # stable ids: the stored output does not change between runs
    assert view_data(first)["keys"] == ["x", "y", "x"]  # repeated tokens stay separate columns


def test_head_view_refuses_bad_shapes_labels_and_indices():
    weights = torch.rand(2, 3, 4, 4)
    with pytest.raises(ValueError, match=r"4-D \[layers, heads, n_q, n_k\], got shape \(3, 4, 4\)"):
        head_view(weights[0], list("abcd"))
    with pytest.raises(ValueError, match=r"shape \(2, 3, 4, 4\) but got 3 query tokens and 3 key"):
        head_view(weights, list("abc"))
    with pytest.raises(ValueError, match=r"`layer_labels` has 1 labels for 2 layers"):
        head_view(weights, list("abcd"), layer_labels=["only"])
    with pytest.raises(ValueError, match=r"`head` must be in \[0, 2\], got 3"):
        head_view(weights, list("abcd"), head=3)
    with pytest.raises(TypeError, match=r"`layer` must be an int, got float"):
        head_view(weights, list("abcd"), layer=1.0)


def test_importing_mhsa_does_not_import_plotly():
    code = "import sys, mhsa, mhsa.course.plotting; print('plotly' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            check=True)
    assert result.stdout.strip() == "False"


def drawn(fig, kind):
    """The gids of the patches of ``fig`` whose gid starts with ``kind``."""
    return [p.get_gid() for p in fig.axes[0].patches if (p.get_gid() or "").startswith(kind)]


@pytest.mark.parametrize(("num_layers", "norm_first"), [(2, False), (3, True)])
def test_plot_encoder_decoder_draws_the_model_it_is_given(num_layers, norm_first):
    model = mhsa.EncoderDecoder(11, 13, 16, 2, 24, num_layers=num_layers, norm_first=norm_first)
    fig = plot_encoder_decoder(model)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert drawn(fig, "encoder.layers.") == [f"encoder.layers.{k}" for k in range(num_layers)]
    assert drawn(fig, "decoder.layers.") == [
        f"decoder.layers.{k}.{name}" for k in range(num_layers)
        for name in ("self_attn", "cross_attn", "feed_forward")]
    # the final encoder output feeds the cross-attention of every decoder layer
    assert drawn(fig, "memory->") == [f"memory->decoder.layers.{k}.cross_attn"
                                      for k in range(num_layers)]
    memory = next(p for p in fig.axes[0].patches if p.get_gid() == "memory")
    last_encoder = next(p for p in fig.axes[0].patches
                        if p.get_gid() == f"encoder.layers.{num_layers - 1}")
    assert memory.get_y() < last_encoder.get_y()  # memory sits below the last encoder layer
    assert [f"encoder layer {k + 1}\nself_attn, feed_forward" for k in range(num_layers)] == [
        t for t in texts if t.startswith("encoder layer")]
    assert "lm_head: Linear(16 → 13)" in texts
    assert "(source vocabulary 11)" in "\n".join(texts)
    assert ("pre-norm" if norm_first else "post-norm") in texts[0]
    assert (drawn(fig, "encoder.norm") == ["encoder.norm"]) == norm_first
    assert (drawn(fig, "decoder.norm") == ["decoder.norm"]) == norm_first
    matplotlib.pyplot.close(fig)


def test_plot_encoder_decoder_refuses_another_model():
    with pytest.raises(TypeError, match=r"`model` must be an mhsa.EncoderDecoder, got Encoder"):
        plot_encoder_decoder(mhsa.Encoder(16, 2, 24, 2))
