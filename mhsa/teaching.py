"""Self-checks for the chapters' exercises.

A reader types a number and runs ``check("02.1", number)`` to learn whether it is
right without opening the hidden solution. Each chapter's answers live in
``mhsa/answers/chNN.py`` as functions that compute them with the package, so they
cannot drift from the code.
"""

import importlib
import math


def expected_answer(exercise: str) -> float:
    """Compute the answer to ``exercise`` (``"NN.k"``: chapter NN, exercise k).

    Raises:
        KeyError: no answer is registered under that name.
    """
    chapter, _, number = exercise.partition(".")
    chapter = chapter.zfill(2)  # "3.1" as printed on the page is "03.1"
    exercise = f"{chapter}.{number}"
    try:
        answers = importlib.import_module(f"mhsa.answers.ch{chapter}").ANSWERS
    except ModuleNotFoundError:
        raise KeyError(f"no answers registered for chapter {chapter!r} ({exercise!r})") from None
    if exercise not in answers:
        raise KeyError(f"no answer registered for exercise {exercise!r}; known: {sorted(answers)}")
    return float(answers[exercise]())


def check(exercise: str, answer, *, tol: float = 1e-2) -> None:
    """Print whether ``answer`` is within ``tol`` (absolute) of the exercise's answer.

    Args:
        exercise: exercise name, e.g. ``"02.1"`` or ``"2.1"`` as the page prints it.
        answer: the reader's number, or ``None`` while not answered yet.
        tol: absolute tolerance.

    Prints one line: correct, not yet, or not answered yet. Returns nothing, so a
    notebook cell shows only that line.

    Raises:
        KeyError: unknown exercise.
    """
    expected = expected_answer(exercise)
    if answer is None:
        print(f"exercise {exercise}: not answered yet; put your number in place of None")
        return
    try:
        value = float(answer)
    except (TypeError, ValueError):
        print(f"exercise {exercise}: give a number, such as 0.5 or 131712; got {answer!r}")
        return
    right = math.isclose(value, expected, abs_tol=tol)
    print(f"exercise {exercise}: {'correct' if right else 'not yet, try again'}")
