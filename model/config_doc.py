"""Config reference table, generated from the models so the docs cannot drift.

`python -m model.config_doc` prints the markdown table that docs/config-reference.md
carries between the `config-reference` markers; `--write` puts it there (the prose
around it is written by hand). tests/repo/test_config_doc.py fails when they differ.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from model.config import ClusterConfig
from model.paths import ROOT


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:  # a validated type: named by what it holds
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = " (optional)" if len(args) < len(typing.get_args(annotation)) else ""
        return " or ".join(_type_name(a) for a in args) + optional
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin is tuple:
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    if origin is dict:
        return "map of string"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    return getattr(annotation, "__name__", str(annotation))


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}"
        annotation = field.annotation
        nested = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        inner = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if "doc_default" in extra:
            default = str(extra["doc_default"])  # filled in by parse_config, e.g. from the stack
        elif field.is_required():
            default = "required"
        elif field.default_factory is not None or nested is not None:
            default = "see below" if nested is not None else "`{}`"
        else:
            default = f"`{field.default!r}`" if field.default not in (None, ()) else "none"
        rows.append(f"| `{path}` | {_type_name(annotation)} | {default} | {field.description or ''} |")
        for sub in [nested] if nested else inner:
            sub_prefix = f"{path}[]" if typing.get_origin(annotation) is tuple else path
            rows.extend(_rows(sub, sub_prefix))
    return rows


def reference_table() -> str:
    head = ["| key | type | default | meaning |", "|---|---|---|---|"]
    return "\n".join(head + _rows(ClusterConfig, ROOT)) + "\n"


DOC = Path(__file__).resolve().parent.parent / "docs" / "config-reference.md"
BEGIN, END = "<!-- config-reference:begin -->\n", "<!-- config-reference:end -->"


def with_table(text: str) -> str:
    """`text` with the generated table between its markers."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}{reference_table()}{END}{tail}"


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        DOC.write_text(with_table(DOC.read_text()))
        print(f"wrote {DOC}")
    else:
        print(reference_table(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
