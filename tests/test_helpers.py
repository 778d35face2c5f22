"""Device choice, the attention-table figure and the exercise self-checks."""

import importlib
import math
import pkgutil

import matplotlib
import pytest
import torch

import mhsa
import mhsa.answers
from mhsa.plotting import plot_attention, plot_heads
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
