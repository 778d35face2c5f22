"""Self-checks for the chapters' exercises.

A reader types a number and runs ``check("2.1", number)`` to learn whether it is
right without opening the hidden solution. Each chapter's answers live in
``mhsa/course/answers/chNN.py`` as functions that compute them with the package, so they
cannot drift from the code. A module may also list, in a ``HINTS`` dict, common wrong
answers with a hint that ``check`` prints when the reader gives one of them.
"""

import ast
import importlib
import inspect
import math
import textwrap

DEFAULT_TOLERANCE = 1e-2  # absolute; an answers module's TOLERANCES may set another per exercise


def _answers_module(exercise: str):
    """``(module of chapter NN's answers, "NN.k")`` for ``"NN.k"`` or ``"N.k"``."""
    chapter, _, number = exercise.partition(".")
    chapter = chapter.zfill(2)  # "3.1" as printed on the page is "03.1"
    exercise = f"{chapter}.{number}"
    try:
        module = importlib.import_module(f"mhsa.course.answers.ch{chapter}")
    except ModuleNotFoundError:
        raise KeyError(f"no answers registered for chapter {chapter!r} ({exercise!r})") from None
    if exercise not in module.ANSWERS:
        raise KeyError(f"no answer registered for exercise {exercise!r}; "
                       f"known: {sorted(module.ANSWERS)}")
    return module, exercise


def expected_answer(exercise: str) -> float:
    """Compute the answer to ``exercise`` (``"NN.k"``: chapter NN, exercise k).

    Raises:
        KeyError: no answer is registered under that name.
    """
    module, exercise = _answers_module(exercise)
    return float(module.ANSWERS[exercise]())


def answer_tolerance(exercise: str) -> float:
    """The absolute tolerance ``check`` allows for ``exercise``.

    ``DEFAULT_TOLERANCE`` unless the chapter's answers module lists another in its
    ``TOLERANCES`` dict: tighter where the question asks for three decimals, looser where it
    asks for a whole number of something non-integer.

    Raises:
        KeyError: no answer is registered under that name.
    """
    module, exercise = _answers_module(exercise)
    return getattr(module, "TOLERANCES", {}).get(exercise, DEFAULT_TOLERANCE)


def check(exercise: str, answer, *, tol: float | None = None) -> None:
    """Print whether ``answer`` is within ``tol`` (absolute) of the exercise's answer.

    Args:
        exercise: exercise name, e.g. ``"02.1"`` or ``"2.1"`` as the page prints it.
        answer: the reader's number, or ``None`` while not answered yet.
        tol: absolute tolerance; by default ``answer_tolerance`` of the exercise.

    Prints one line: correct, not yet, or not answered yet; after "not yet", a second line
    with a hint when the answer is a common mistake listed in the answers module's ``HINTS``
    (``{"NN.k": [(wrong answer, hint), ...]}``, matched within the same tolerance). Returns
    nothing, so a notebook cell shows only those lines.

    Raises:
        KeyError: unknown exercise.
    """
    expected = expected_answer(exercise)
    tol = answer_tolerance(exercise) if tol is None else tol
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
    if not right:
        for wrong, hint in answer_hints(exercise):
            if math.isclose(value, wrong, abs_tol=tol):
                print(f"hint: {hint}")
                break


def answer_hints(exercise: str) -> list[tuple[float, str]]:
    """Common wrong answers to ``exercise`` with the hint ``check`` prints for each.

    Raises:
        KeyError: no answer is registered under that name.
    """
    module, exercise = _answers_module(exercise)
    return list(getattr(module, "HINTS", {}).get(exercise, []))


def glue(name: str, value, fmt: str | None = None) -> None:
    """Store ``value`` under ``name`` for the book's text, without showing it in the cell.

    The chapters' prose inserts it with myst-nb's ``glue:text`` role, the name and then the
    format the text shows it with (``{glue:text}`speedup:.1f```), so a number in the text is
    always the one the cell computed. Where myst-nb is not installed (a plain Jupyter or
    Colab runtime) this does nothing: the text then has nothing to insert.

    A float is stored rounded to the digits ``fmt`` shows (``mhsa.course.teaching.rounded_as_shown``), no
    more: the last bits of float arithmetic change with the CPU's vector width, its BLAS and
    the thread count, and a stored output that kept them would differ on a reader's machine
    (nbval compares stored outputs strictly). ``tests/book/test_book.py`` checks that every float
    a page shows was glued at the precision of its ``glue:text`` role.

    Args:
        name: the key the text refers to; unique within a notebook.
        value: a Python number, bool or string; a one-element tensor is converted with
            ``.item()``.
        fmt: the format spec the text uses for this key, such as ``".2f"``, ``",.0f"`` or
            ``".1%"``. Required for a float; optional otherwise.

    Raises:
        TypeError: ``value`` is a float and ``fmt`` is missing, or ``value`` is not a
            number, bool or string.
        ValueError: ``fmt`` is not a format spec that applies to ``value``.
    """
    if hasattr(value, "item"):
        value = value.item()
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"`value` of {name!r} must be a number, bool or string, got "
                        f"{type(value).__name__}")
    if isinstance(value, float):
        if fmt is None:
            raise TypeError(f"glue({name!r}, {value!r}) needs `fmt`, the format the text shows "
                            "it with (such as '.2f'): a float is stored only to those digits")
        value = rounded_as_shown(value, fmt)
    elif fmt is not None:
        try:
            format(value, fmt)
        except ValueError as error:
            raise ValueError(f"`fmt` {fmt!r} does not apply to {value!r}: {error}") from None
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, value, display=False)


def rounded_as_shown(value: float, fmt: str) -> float:
    """``value`` rounded to the digits that ``format(value, fmt)`` shows, as a float.

    ``rounded_as_shown(0.0969519, ".2f") == 0.1``; ``rounded_as_shown(8191.6, ",.0f") ==
    8192.0``; ``rounded_as_shown(0.12345, ".1%") == 0.123``; ``rounded_as_shown(1234.5,
    ".3g") == 1230.0``. Formatting the result with ``fmt`` gives the same text as formatting
    ``value``.

    Raises:
        ValueError: ``fmt`` is not a float format (its type must be one of ``eEfFgG%``).
    """
    if not fmt or fmt[-1] not in "eEfFgG%":
        raise ValueError(f"`fmt` must be a float format such as '.2f', ',.0f', '.1%' or '.3g', "
                         f"got {fmt!r}")
    number = format(value, fmt).replace(",", "").replace("_", "").strip()
    if number.endswith("%"):  # 12.3% is 0.123; 15 digits drop the division's last bit
        return float(f"{float(number[:-1]) / 100:.15g}")
    return float(number)


def source_code(function) -> str:
    """The source of ``function`` (a function or method) without its docstring or comment lines.

    What a chapter prints to show code as it stands in the package; the docstring is on the
    API page. The lines keep their order and indentation (the ``def`` line's dedented to 0).

    Args:
        function: a Python function or method defined in a source file.

    Returns:
        the code, lines joined with newlines.

    Raises:
        TypeError: ``function`` is not a Python function or method (see ``inspect.getsource``).

    Source: the standard library's ``inspect.getsource`` and ``ast`` (docstring positions).
    """
    if not (inspect.isfunction(function) or inspect.ismethod(function)):
        raise TypeError(f"`function` must be a Python function or method, got "
                        f"{type(function).__name__}")
    lines = textwrap.dedent(inspect.getsource(function)).splitlines()
    node = ast.parse("\n".join(lines)).body[0]
    first = node.body[0]
    skip = set()
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        skip = set(range(first.lineno - 1, first.end_lineno))
    kept = [line for k, line in enumerate(lines)
            if k not in skip and not line.strip().startswith("#")]
    return "\n".join(kept)
