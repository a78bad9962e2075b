"""Pydantic's shape errors as `path: message` lines a stack-file author can act on."""

from __future__ import annotations

from pydantic import ValidationError

from model.base import got
from model.paths import loc_to_path

# Pydantic messages that name Python classes or say nothing about the value given.
_SHAPE_MESSAGES = {
    "model_type": "must be an object (a mapping of keys, see docs/config-reference.md)",
    "model_attributes_type": "must be an object (a mapping of keys, see docs/config-reference.md)",
    "dict_type": "must be a mapping of keys to values",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string (quote it)",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
}


def shape_problems(err: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key; remove it or check its spelling against docs/config-reference.md"
        elif e["type"] == "missing":
            msg = "required; add it to the stack file"
        elif e["type"] in _SHAPE_MESSAGES:
            msg = f"{_SHAPE_MESSAGES[e['type']]} (got {got(e['input'])})"
        elif e["type"] == "literal_error" or e["type"].startswith(("greater_than", "less_than", "datetime")):
            msg = f"{msg} (got {got(e['input'])})"
        problems.append((loc_to_path(e["loc"]), msg))
    return problems
