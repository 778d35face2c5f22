"""Device choice, the attention-table figure and the exercise self-checks."""

import importlib
import json
import math
import pkgutil
import re
import subprocess
import sys

import matplotlib
import pytest
import torch

import mhsa
import mhsa.answers
from mhsa.plotting import head_view, plot_attention, plot_heads
from mhsa.teaching import check, expected_answer

matplotlib.use("Agg")


def test_default_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert mhsa.default_device() == torch.device("cpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert mhsa.default_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert mhsa.default_device() == torch.device("cuda")


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
    assert torch.allclose(torch.tensor(data["weights"]), weights, atol=5e-4)  # 3 decimals
    assert (data["queries"], data["keys"]) == (list("abcd"), list("vwxyz"))
    assert (data["layer"], data["head"], data["row"]) == (1, 2, 3)
    assert re.findall(r'<option value="\d+"( selected)?>(layer \d)', view.html) == [
        ("", "layer 1"), (" selected", "layer 2")]
    assert len(re.findall(r"<option value=\"\d+\"[^>]*>head \d", view.html)) == 3
    assert view.figure.layout.title.text == "cross: layer 2, head 2"
    heatmap, bars = view.figure.data
    assert torch.allclose(torch.tensor(heatmap.z), weights[1, 2], atol=5e-4)
    assert torch.allclose(torch.tensor(bars.y), weights[1, 2, 3], atol=5e-4)
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
    code = "import sys, mhsa, mhsa.plotting; print('plotly' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            check=True)
    assert result.stdout.strip() == "False"


def registered_answers():
    for info in pkgutil.iter_modules(mhsa.answers.__path__):
        module = importlib.import_module(f"mhsa.answers.{info.name}")
        yield from module.ANSWERS


@pytest.mark.parametrize("exercise", sorted(registered_answers()))
def test_every_registered_answer_computes_a_number(exercise, capsys):
    value = expected_answer(exercise)
    assert math.isfinite(value)
    check(exercise, value)
    assert capsys.readouterr().out == f"exercise {exercise}: correct\n"
    check(exercise, value + 1.0)
    assert capsys.readouterr().out == f"exercise {exercise}: not yet, try again\n"
    check(exercise, None)
    assert "not answered yet" in capsys.readouterr().out


@pytest.mark.parametrize(("exercise", "answer", "verdict"), [
    ("05.2", 0.296, "correct"),  # "round to three decimals"
    ("05.2", 0.3, "not yet, try again"),  # the angle, not its sine
    ("05.4", 628, "correct"),  # "after how many positions": a whole number will do
    ("05.4", 630, "not yet, try again"),
    ("08.1", 0.22, "correct"),  # "to 2 decimals"
    ("08.1", 0.23, "not yet, try again"),
])
def test_check_tolerance_follows_what_the_question_asks(exercise, answer, verdict, capsys):
    check(exercise, answer)
    assert capsys.readouterr().out == f"exercise {exercise}: {verdict}\n"


def test_unknown_exercise_is_a_clear_error():
    with pytest.raises(KeyError, match="no answers registered for chapter '99'"):
        check("99.1", 1.0)


def test_check_accepts_the_page_numbering_and_refuses_non_numbers(capsys):
    value = expected_answer("02.1")
    assert expected_answer("2.1") == value
    check("2.1", value)
    assert capsys.readouterr().out == "exercise 2.1: correct\n"
    check("02.1", "131,712")
    assert "give a number" in capsys.readouterr().out


def test_random_layers_look_right_a_little_over_half_the_time_and_rarely_for_every_sentence():
    from mhsa.answers.ch01 import random_layer_sense_scores

    scores = random_layer_sense_scores(2000)
    # 2,000 draws: a share's standard error is at most 0.011, so these bands hold for any seed
    assert 0.50 < scores["average"] < 0.60
    assert 0.06 < scores["each"] < 0.17
    assert random_layer_sense_scores(2000) == scores  # seeded: the chapter's glued numbers are stable


# -- the input checks ---------------------------------------------------------------------

def test_check_broadcast_agrees_with_torch_broadcast_shapes():
    from itertools import product

    from mhsa._checks import check_broadcast

    target = (2, 3, 1, 4)
    for rank in range(6):
        for shape in product([1, 2, 3, 4, 5], repeat=rank):
            try:
                expected = rank <= 4 and torch.broadcast_shapes(shape, target) == target
            except RuntimeError:
                expected = False
            try:
                check_broadcast("m", torch.empty(shape, device="meta"), target, "the target")
                got = True
            except ValueError:
                got = False
            assert got == expected, shape


@pytest.mark.parametrize("value, error", [(2.0, TypeError), (True, TypeError), ("3", TypeError),
                                          (0, ValueError), (-1, ValueError)])
def test_one_exception_type_per_kind_of_mistake(value, error):
    """A non-integer is a TypeError and an out-of-range int a ValueError, everywhere."""
    calls = [lambda: mhsa.MultiHeadAttention(value, 1),
             lambda: mhsa.sliding_window_mask(2, window=value),
             lambda: mhsa.patchify(torch.zeros(1, 1, 4, 4), value),
             lambda: mhsa.FeedForward(4, value)]
    if value != 0:  # causal_mask(2, 0) is an allowed, empty mask
        calls.append(lambda: mhsa.causal_mask(2, value))
    for call in calls:
        with pytest.raises(error):
            call()
