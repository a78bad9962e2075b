"""Edits of a raw stack-file config by dotted path, shared by the config tests."""

from __future__ import annotations


def _set(raw, path, value):
    node = raw
    parts = path.split(".")
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    last = parts[-1]
    if value is _DEL:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


_DEL = object()
