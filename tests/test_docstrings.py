"""Every public docstring parses the way the API page renders it: Napoleon's Google style, with the book's
configuration, gives argument, attribute and exception names that are names.

A Google-style section reads ``name (type): description``, one entry per line. A prose sentence in an
``Attributes:`` or ``Args:`` section (or an entry wrapped onto a new line without indentation) becomes an
"attribute" called ``its layers in ``encoder.layers``).`` on the rendered page; this test catches that.
"""

import importlib
import inspect
import pkgutil
import re

import pytest
import yaml
from sphinx.ext.napoleon import Config
from sphinx.ext.napoleon.docstring import GoogleDocstring

import mhsa

from paths import ROOT

IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
# what may follow ":param", ".. attribute::" ...: a name, *args / **kwargs (escaped or not), or several
# names separated by commas ("device, dtype: where and in which dtype")
NAME = rf"(?:\\?\*){{0,2}}{IDENTIFIER}"
NAMES = re.compile(rf"{NAME}(?:, {NAME})*")
DOTTED = re.compile(rf"~?{IDENTIFIER}(?:\.{IDENTIFIER})*")
# Napoleon's output: the fields whose first word is a name
FIELDS = {
    "param": re.compile(r"^\s*:param ([^:]*):", re.MULTILINE),
    "keyword": re.compile(r"^\s*:keyword ([^:]*):", re.MULTILINE),
    "ivar": re.compile(r"^\s*:ivar ([^:]*):", re.MULTILINE),
    "attribute": re.compile(r"^\s*\.\. attribute:: (.*)$", re.MULTILINE),
}
RAISES = re.compile(r"^\s*:raises ([^:]*):", re.MULTILINE)
TYPES = re.compile(r"^\s*:(?:type|vartype) ?[^:]*: (.*)$", re.MULTILINE)


def napoleon_config() -> Config:
    """The book's Napoleon settings, read from _config.yml (sphinx.config.napoleon_*)."""
    settings = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    return Config(**{key: value for key, value in settings.items() if key.startswith("napoleon_")})


def public_objects():
    """(qualified name, object, autodoc kind) for every public module, function, class and class member.

    Covers everything ``chapters/api.md`` can render: each public module of the package, every name in
    ``mhsa.__all__``, every public function or class a module defines, and the public methods and
    properties of those classes. New modules and classes are found without editing this test.
    """
    modules = [mhsa] + [importlib.import_module(m.name)
                        for m in pkgutil.walk_packages(mhsa.__path__, prefix="mhsa.")
                        if not any(part.startswith("_") or part == "answers"
                                   for part in m.name.split("."))]
    found = {}
    for module in modules:
        found[module.__name__] = (module, "module")
        for name, obj in vars(module).items():
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if obj.__module__.split(".")[0] != "mhsa":
                continue
            qualified = f"{obj.__module__}.{obj.__qualname__}"
            found[qualified] = (obj, "class" if inspect.isclass(obj) else "function")
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    if member.startswith("_"):
                        continue
                    if isinstance(value, property):
                        found[f"{qualified}.{member}"] = (value, "property")
                    elif inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)):
                        found[f"{qualified}.{member}"] = (getattr(obj, member), "method")
    return sorted((name, obj, kind) for name, (obj, kind) in found.items())


OBJECTS = public_objects()


def test_the_collection_covers_the_api_page():
    names = {name for name, _, _ in OBJECTS}
    for expected in ("mhsa.models.pretrained.BertEncoder", "mhsa.models.pretrained.PretrainedEncoder",
                     "mhsa.attention.multihead.MultiHeadAttention.forward", "mhsa.core.functional.scaled_dot_product_attention"):
        assert expected in names


def bad_names(docstring: str, what: str, name: str, obj) -> list[str]:
    """The field names that Napoleon's rendering of ``docstring`` makes out of text that is not a name."""
    rendered = str(GoogleDocstring(docstring, napoleon_config(), what=what, name=name, obj=obj))
    problems = []
    for field, pattern in FIELDS.items():
        for found in pattern.findall(rendered):
            if not NAMES.fullmatch(found.strip()):
                problems.append(f"{field} {found.strip()!r}")
    for found in RAISES.findall(rendered):
        if not all(DOTTED.fullmatch(part.strip()) for part in found.split(",")):
            problems.append(f"raises {found.strip()!r}")
    for found in TYPES.findall(rendered):  # two entries run together: "(A, in eval mode), b (B"
        if found.count("(") != found.count(")"):
            problems.append(f"type {found.strip()!r}")
    return problems


def test_the_check_rejects_prose_as_an_attribute_name():
    prose = """A thing.

    Attributes:
        embeddings (Embeddings); encoder (Encoder, post-norm,
        its layers in ``encoder.layers``).
    """
    clean = """A thing.

    Attributes:
        embeddings (Embeddings): the input layer.
        encoder (Encoder): post-norm; its layers are in ``encoder.layers``.
    """
    assert bad_names(inspect.cleandoc(prose), "class", "Thing", None)
    assert not bad_names(inspect.cleandoc(clean), "class", "Thing", None)


@pytest.mark.parametrize(("name", "obj", "kind"), OBJECTS, ids=[name for name, _, _ in OBJECTS])
def test_docstring_field_names_are_names(name, obj, kind):
    docstring = inspect.getdoc(obj)
    if not docstring:
        pytest.skip("no docstring of its own (the lint test of the API page checks coverage)")
    what = {"property": "attribute"}.get(kind, kind)
    problems = bad_names(docstring, what, name, obj)
    assert not problems, (f"{name}: Napoleon renders these as names; write one 'name (type): text' "
                          f"entry per line, continuation lines indented: {problems}")
