"""`hooks`: site-specific scripts the nodes run at boot (`on_node_ready`, the last step)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from model.base import Strict

# What a hook may be: a script, not a payload (large files belong on S3 or /fsx).
MAX_HOOK_BYTES = 64 * 1024
DEFAULT_HOOK_TIMEOUT_MINUTES = 10
MAX_HOOK_TIMEOUT_MINUTES = 120


def _hook_path_shape(v: str) -> str:
    p = PurePosixPath(v)
    if p.is_absolute() or ".." in p.parts or not v or "\\" in v:
        raise ValueError(
            f"'{v}' must be a relative path inside the project (next to Pulumi.yaml), without '..', e.g. 'hooks/on-node-ready.sh'"
        )
    return v


def check_hook_text(data: bytes, what: str) -> str:
    """The hook's text, or ValueError naming what is wrong and the fix."""
    if len(data) > MAX_HOOK_BYTES:
        raise ValueError(
            f"{what} is {len(data)} bytes, over the {MAX_HOOK_BYTES} a hook may have; a hook is a setup "
            "script: put large files on S3 or /fsx and fetch them from the hook"
        )
    if not data.startswith(b"#!"):
        raise ValueError(f"{what} does not start with '#!' (e.g. '#!/bin/bash'); the node runs it as a program")
    if b"\0" in data:
        raise ValueError(f"{what} contains NUL bytes; a hook is a text script")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8 text; save it as UTF-8") from None


def read_hook_file(base_dir: Path, rel: str) -> str:
    path = base_dir / rel
    if not path.is_file():
        raise ValueError(f"{path} does not exist or is not a file; the path is relative to {base_dir}")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    return check_hook_text(data, str(path))


def _base_dir(info: ValidationInfo) -> Path:
    context = info.context or {}
    return Path(context.get("base_dir") or Path.cwd())


class NodeReadyHook(Strict):
    path: Annotated[str, AfterValidator(_hook_path_shape)] | None = Field(
        None, description="Script file, relative to the project directory (where Pulumi.yaml is)."
    )
    script: str | None = Field(None, description="The script itself, inline (instead of path); starts with '#!'.")
    timeout_minutes: int = Field(
        DEFAULT_HOOK_TIMEOUT_MINUTES,
        ge=1,
        le=MAX_HOOK_TIMEOUT_MINUTES,
        description="The hook is killed after this long and the boot fails at the hook step.",
    )
    run_on: Literal["all", "controller", "workers"] = Field("all", description="Which nodes run it.")
    _text: str = PrivateAttr("")

    @field_validator("path")
    @classmethod
    def _readable(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            read_hook_file(_base_dir(info), v)
        return v

    @field_validator("script")
    @classmethod
    def _inline(cls, v: str | None) -> str | None:
        if v is not None:
            check_hook_text(v.encode("utf-8"), "the inline script")
        return v

    @model_validator(mode="after")
    def _one_source(self, info: ValidationInfo) -> NodeReadyHook:
        if (self.path is None) == (self.script is None):
            raise ValueError("set exactly one of path (a script file in the project) or script (the text inline)")
        self._text = self.script if self.script is not None else read_hook_file(_base_dir(info), self.path or "")
        return self

    @property
    def text(self) -> str:
        """The script the nodes run, ending in one newline."""
        return self._text.rstrip("\n") + "\n"


class HooksConfig(Strict):
    on_node_ready: NodeReadyHook | None = Field(
        None, description="Script every node (or run_on's nodes) runs as the last boot step."
    )
