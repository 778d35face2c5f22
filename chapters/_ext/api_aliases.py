"""Sphinx extension: a docstring may name an object of ``mhsa`` by any of its paths.

The API page documents each exported name once, as the chapters call it
(``mhsa.causal_mask``), while a docstring inside ``mhsa.core.masks`` may write
``:func:`causal_mask``` or ``:func:`mhsa.core.masks.causal_mask```. When such a Python
reference finds no entry, this imports the object it names and, if the same object is
documented under another name, links to that entry instead of leaving a broken link.
"""

import importlib
import inspect

from sphinx.util.nodes import make_refnode

PACKAGE = "mhsa"


def _import(dotted: str):
    """The object at ``dotted`` (module path, then attributes), or None."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _is_api_object(obj) -> bool:
    return inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj)


def _resolve(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    context = [node.get("py:module"), node.get("py:class")]
    prefixes = [".".join(p for p in context if p), node.get("py:module"), ""]
    wanted = None
    for prefix in dict.fromkeys(p for p in prefixes if p is not None):
        name = f"{prefix}.{target}" if prefix else target
        if name.split(".")[0] == PACKAGE:
            obj = _import(name)
            if obj is not None and _is_api_object(obj):
                wanted = obj
                break
    if wanted is None:
        return None
    for name, entry in env.get_domain("py").objects.items():
        if name.split(".")[0] == PACKAGE and not entry.aliased and _import(name) is wanted:
            return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id,
                                contnode, name)
    return None


def setup(app):
    app.connect("missing-reference", _resolve)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
