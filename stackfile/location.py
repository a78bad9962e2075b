"""Where a stack's file is: `Pulumi.<stack>.yaml` in the project directory, or the
file `--config-file` names (as `pulumi --config-file`)."""

from __future__ import annotations

import re
from pathlib import Path

from stackfile.errors import InputError

# Pulumi stack names: letters, digits, '-', '_' and '.'; also keeps `--stack` inside
# the project directory (it becomes a file name).
_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_PREFIX, _SUFFIX = "Pulumi.", ".yaml"


def stack_file(stack: str, root: Path, config_file: Path | None = None) -> Path:
    if config_file is not None:
        return Path(config_file)
    if not _STACK_NAME.match(stack):
        raise InputError([f"--stack {stack!r}: a stack name is letters, digits, '-', '_' and '.'"])
    return root / f"{_PREFIX}{stack}{_SUFFIX}"


def stack_names(root: Path) -> list[str]:
    """The stacks whose files are in `root`, sorted."""
    return sorted(p.name[len(_PREFIX) : -len(_SUFFIX)] for p in root.glob(f"{_PREFIX}*{_SUFFIX}"))
