"""The exercise self-checks: every registered answer, check() and its hints, glue, rounding."""

import importlib
import math
import pkgutil

import pytest
import torch

import mhsa
import mhsa.course.answers
from mhsa.course.teaching import check, expected_answer, rounded_as_shown

from tolerances import worst_case


def registered_answers():
    for info in pkgutil.iter_modules(mhsa.course.answers.__path__):
        module = importlib.import_module(f"mhsa.course.answers.{info.name}")
        yield from module.ANSWERS


# Each answer worked out by hand from the exercise's text, independently of mhsa.course.answers.
DERIVED = {
    "01.1": 1.0,  # equal input vectors, one per-token MLP: equal outputs, cosine 1
    "01.2": 1 / 5,  # zero queries: equal scores, softmax spreads 1 evenly over 5 tokens
    "01.3": 1.0,  # without positions, attention is permutation-equivariant: same vector
    "02.1": 3 * 2 + (-1) * 0,  # world's query (3, -1) with Hello's key (2, 0)
    "02.2": math.exp(19 / 8) / sum(math.exp(s / 8) for s in (11, 16, 19)),  # sqrt(64) = 8
    "02.3": math.log(0.05 / 0.9),  # softmax(0, s, s) = (0.9, 0.05, 0.05)
    "02.4": math.sqrt(32 / 256),  # std sqrt(d) / sqrt(e)
    "03.1": 3 * (256 * 128 + 128) + (128 * 256 + 256),  # q, k, v to 128, then back to 256
    "03.2": math.sqrt(768 / 12),
    "03.3": (2 * 6 + 0) * 5 // (4 * 5),  # flat offset (head * n + token) * d, rows of h * d
    "04.1": 21 + (1 + 2 + 3 + 4 + 4 + 4) + 6,  # lengths 6, 4, 1: sum of min(i + 1, length)
    "04.2": (5 + 6 + 7) - (1 + 2 + 3),  # bottom-right rows see 5, 6, 7 keys; top-left 1, 2, 3
    "04.3": 16,  # float16 spacing at 65504 is 32; -65504 - 16 rounds (to even) to -inf
    "05.1": 4 * (256 * 256 + 256) + (256 * 1024 + 1024) + (1024 * 256 + 256) + 2 * 2 * 256,
    "05.2": math.sin(3 / 10000 ** (2 / 8)),  # PE[pos 3, dim 2] = sin(3 / 10000^(2i/e)), i = 1
    "05.3": (1 - 2.5) / math.sqrt(1.25 + 1e-5),  # mean 2.5, variance 1.25, LayerNorm eps 1e-5
    "05.4": 2 * math.pi * 10000 ** (2 * 128 / 512),
    "06.1": 2 * 4 * 5 * 7,  # batch, heads, target tokens, memory tokens
    "06.2": 6 * 7 // 2,
    "06.3": 4 * (32 * 32 + 32),
    "06.3b": 4 * (32 * 32 + 32),  # 8 heads instead of 4: the same four 32 x 32 projections
    "07.1": (224 // 16) ** 2 + 1,
    "07.2": (5 // 2) * (8 // 2) + 6 // 2,  # patch row 2, column 3 in a 4 x 4 grid
    "07.3": 16 * 16 * 3 * 768 + 768,
    "07.4": ((8 // 4) ** 2 + 1) ** 2,
    "09.1": 2 * 4 * 12 * 4096 * 4096 / 2**30,  # float16: 2 bytes
    "09.2": 2 * 768,  # 4 n^2 e = 8 n e^2 at n = 2 e
    "09.3": 12 * 2 * (12 * 1024 * 64) * 2 / 2**20,  # layers, keys and values, entries, bytes
    "09.4": 2 * (2 * 1000 * 512 * 512) / 1e9,  # keys and values: 2 multiply-adds per weight
    "10.1": math.exp(3.2),  # perplexity = e^(mean loss in nats)
    "10.2": 2 * 80 * 8 * 128 * 2 / 2**10,  # keys and values, layers, kv heads, head_dim, bytes
    "10.3": -math.log(0.01 / (99 + 0.01 * 512)),  # additive smoothing: (0 + alpha) / (count(a) + alpha V)
    "11.1": 32 * (4096 - 1),  # each layer reaches window - 1 positions further back
    "11.2": 2 * 32 * 8 * 128 * 2 * 4096 / 2**20,  # per-token bytes times the window, in MiB
    "11.3": 3,  # "x a b c d x a b": the last b's earlier copy sits at 2, the token after it at 3
    "12.1": (512 + 64) * 2 * 60 / 2**10,  # latent and rotary key, 2 bytes each, 60 layers, in KiB
    "12.2": (4 + 1 / 2) / 2,  # 2 n_g d_h = d_c + d_h^R = 4 d_h + d_h / 2
    "12.3": 80 * (2 * 8 * 128 + 4 * 8 * 128 / 32 + 4 * 8) / 2**10,  # codes, key and value scales
    "13.1": math.sqrt(128),  # normed q and k have length sqrt(d): at most d / sqrt(d)
    "13.2": 50 * math.tanh(100 / 50),  # cap * tanh(score / cap)
    "13.3": 4 ** (2 * 4 / (16 - 2)),  # NTK-aware: theta_p / s^(2p/(d-2)), p = 4, d = 16
    "13.4": 2 * 32 * 32 * 128 * 2 * (4 + 1020) / 2**20,  # sinks and window, in MiB
}


# Chapter 8's answers are properties of the pretrained weights: tests/models/test_pretrained.py
# checks them against sentence-transformers and transformers' BertModel.
FROM_THE_MODEL = {"08.1", "08.2", "08.3"}


def test_every_registered_answer_is_derived_here_or_checked_against_the_model():
    assert set(registered_answers()) == set(DERIVED) | FROM_THE_MODEL


@pytest.mark.parametrize("exercise", sorted(DERIVED))
def test_registered_answer_equals_the_hand_derivation(exercise, capsys):
    # Answers are computed in float32 through at most a handful of operations, or in float64,
    # or are whole numbers: eight float32 roundings cover it.
    tol = worst_case(torch.float32, 8)
    assert math.isclose(expected_answer(exercise), DERIVED[exercise], rel_tol=tol["rtol"],
                        abs_tol=tol["atol"])
    check(exercise, DERIVED[exercise])
    assert capsys.readouterr().out == f"exercise {exercise}: correct\n"


def test_pencil_table_is_the_one_worked_out_by_hand():
    from mhsa.course.answers.ch02 import pencil_scores

    # queries Hello (1, 2), world (3, -1); keys Hello (2, 0), world (1, 2); rows are queries
    by_hand = torch.tensor([[1 * 2 + 2 * 0, 1 * 1 + 2 * 2], [3 * 2 - 1 * 0, 3 * 1 - 1 * 2]])
    assert torch.equal(pencil_scores(), by_hand.float())  # small integers: exact in float32
    assert pencil_scores().argmax(dim=-1).tolist() == [1, 0]  # each query prefers the other key


def test_check_hints_at_the_transposed_cell_of_the_pencil_table(capsys):
    check("02.1", 1 * 1 + 2 * 2)  # Hello's query with world's key: keys taken as the rows
    verdict, hint = capsys.readouterr().out.splitlines()
    assert verdict == "exercise 02.1: not yet, try again"
    assert hint.startswith("hint: ") and "Queries are on the rows" in hint


def test_check_says_correct_within_the_tolerance_and_not_yet_outside(capsys):
    # 03.2's answer is 8 (sqrt(64)); the default tolerance is 0.01, absolute
    for answer, verdict in [(8.009, "correct"), (7.991, "correct"), (8.011, "not yet, try again"),
                            (9, "not yet, try again")]:
        check("03.2", answer)
        assert capsys.readouterr().out == f"exercise 03.2: {verdict}\n", answer
    check("03.2", None)
    assert "not answered yet" in capsys.readouterr().out


@pytest.mark.parametrize(("exercise", "answer", "verdict"), [
    ("05.2", 0.296, "correct"),  # "round to three decimals"
    ("05.2", 0.3, "not yet, try again"),  # the angle, not its sine
    ("05.4", 628, "correct"),  # "after how many positions": a whole number will do
    ("05.4", 630, "not yet, try again"),
    ("08.1", 0.22, "correct"),  # "to 2 decimals"
    ("08.1", 0.23, "not yet, try again"),
    ("08.2", 0.486, "correct"),  # "to 3 decimals"
    ("08.2", 0.49, "not yet, try again"),  # the 2-decimal value chapter 8's table once showed
])
def test_check_tolerance_follows_what_the_question_asks(exercise, answer, verdict, capsys):
    check(exercise, answer)
    assert capsys.readouterr().out == f"exercise {exercise}: {verdict}\n"


def test_check_prints_the_hint_for_a_listed_mistake_and_only_for_it(capsys):
    # 11.1: 32 * 4096, the paper's round figure, instead of 32 * (4096 - 1)
    check("11.1", 32 * 4096)
    verdict, hint = capsys.readouterr().out.splitlines()
    assert verdict == "exercise 11.1: not yet, try again"
    assert hint.startswith("hint: ") and "4095" in hint
    check("11.1", 32 * 4096 + 100)  # a wrong answer without a hint: the verdict alone
    assert capsys.readouterr().out == "exercise 11.1: not yet, try again\n"


def test_every_hint_is_for_a_wrong_answer():
    from mhsa.course.teaching import answer_hints, answer_tolerance

    for exercise in registered_answers():
        for wrong, _ in answer_hints(exercise):
            assert not math.isclose(wrong, expected_answer(exercise),
                                    abs_tol=answer_tolerance(exercise)), exercise


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
    from mhsa.course.answers.ch01 import random_layer_sense_scores

    scores = random_layer_sense_scores(2000)
    # 2,000 draws: a share's standard error is at most 0.011, so these bands hold for any seed
    assert 0.50 < scores["average"] < 0.60
    assert 0.06 < scores["each"] < 0.17
    assert random_layer_sense_scores(2000) == scores  # seeded: the chapter's glued numbers are stable


def test_random_layers_score_below_half_once_the_throwing_sentences_share_no_word():
    from mhsa.course.answers.ch01 import (
        SENSE_SENTENCES_NO_SHARED_WORD,
        random_layer_sense_scores,
    )

    # the control of exercise 1.4: "A crowd stoned a thief." shares no "the" with the first
    assert SENSE_SENTENCES_NO_SHARED_WORD["throwing"][1] == ["A", "crowd", "stoned", "a", "thief", "."]
    scores = random_layer_sense_scores(2000)
    control = random_layer_sense_scores(2000, sentences=SENSE_SENTENCES_NO_SHARED_WORD)
    # 2,000 draws each: the difference of two shares has a standard error of about 0.016, so a
    # gap of 0.05 is three of them
    assert 0.40 < control["average"] < 0.50
    assert scores["average"] - control["average"] > 0.05
    # the default is the chapter's set of sentences
    assert random_layer_sense_scores(2000, sentences=None) == scores


def test_glue_needs_the_format_the_text_shows_a_float_with():
    from mhsa.course.teaching import glue

    with pytest.raises(TypeError, match=r"needs `fmt`.*'\.2f'"):
        glue("ratio", 0.0969519)
    with pytest.raises(TypeError, match=r"needs `fmt`"):
        glue("ratio", torch.tensor(0.5))  # a one-element tensor is a float too
    with pytest.raises(ValueError, match=r"float format"):
        glue("ratio", 0.5, ",d")
    with pytest.raises(ValueError, match=r"`fmt` ',d' does not apply to 'two'"):
        glue("word", "two", ",d")
    with pytest.raises(TypeError, match=r"number, bool or string, got list"):
        glue("heads", [1, 2])


def test_rounded_as_shown_keeps_exactly_the_digits_a_format_shows():
    assert rounded_as_shown(0.0969519, ".2f") == 0.1
    assert rounded_as_shown(1.88217, ".1f") == 1.9
    assert rounded_as_shown(8191.6, ",.0f") == 8192.0
    assert rounded_as_shown(0.12345, ".1%") == 0.123
    assert rounded_as_shown(1234.5, ".3g") == 1230.0
    assert rounded_as_shown(-0.136, "+.2f") == -0.14
    with pytest.raises(ValueError, match="float format"):
        rounded_as_shown(1.5, ",d")


def test_source_code_drops_the_docstring_and_comment_lines_only():
    from mhsa.course.teaching import source_code

    def example(x):
        """A docstring
        over two lines."""
        # a comment line
        y = x + 1  # a trailing comment stays
        return y

    assert source_code(example) == ("def example(x):\n    y = x + 1  # a trailing comment stays\n"
                                    "    return y")
    code = source_code(mhsa.MultiHeadAttention.forward)
    assert code.startswith("def forward(self, query") and '"""' not in code
    with pytest.raises(TypeError, match="`function` must be a Python function or method"):
        source_code(len)
