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
    chapter = exercise.split(".")[0]
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
        exercise: exercise name as printed in the chapter, e.g. ``"02.1"``.
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
    right = math.isclose(float(answer), expected, abs_tol=tol)
    print(f"exercise {exercise}: {'correct' if right else 'not yet, try again'}")
