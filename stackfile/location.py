"""Where a stack's file is: `Pulumi.<stack>.yaml` in the project directory, or the
file `--config-file` names (as `pulumi --config-file`)."""

from __future__ import annotations

import re
from pathlib import Path

from stackfile.errors import InputError

# Pulumi stack names: letters, digits, '-', '_' and '.'; also keeps `--stack` inside
# the project directory (it becomes a file name).
_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# Pulumi's limit on a stack name's length [PULUMI-STACK-NAME].
MAX_STACK_NAME = 100
_PREFIX, _SUFFIX = "Pulumi.", ".yaml"


def stack_name_problem(stack: str) -> str | None:
    if _STACK_NAME.match(stack) and len(stack) <= MAX_STACK_NAME:
        return None
    return f"--stack {stack[:80]!r}: a stack name is 1-{MAX_STACK_NAME} letters, digits, '-', '_' and '.'"


def stack_file(stack: str, root: Path, config_file: Path | None = None) -> Path:
    """The stack's file. The name is checked with `--config-file` too: the program's AWS
    names derive from it (ClusterConfig.aws_name_base), whichever file the config is in."""
    problem = stack_name_problem(stack)
    if problem:
        raise InputError([problem])
    if config_file is not None:
        return Path(config_file)
    return root / f"{_PREFIX}{stack}{_SUFFIX}"


def stack_names(root: Path) -> list[str]:
    """The stacks whose files are in `root`, sorted."""
    return sorted(p.name[len(_PREFIX) : -len(_SUFFIX)] for p in root.glob(f"{_PREFIX}*{_SUFFIX}"))
