"""Where node files come from: the one jinja2 Environment (STYLE: one Environment) for
the few that are rendered, and the nodeside/ tree for the ones shipped verbatim.

Templates live under userdata/templates/ and are named from there
(`jobs/...`, `slurm/...`, `validation/...`); verbatim files under nodeside/ are named
from there (`bin/...`, `steps/...`, `validation/gate.sh`). Undefined names fail loudly; output
keeps trailing newlines so files are byte-stable. Jinja comments are `{## ... ##}`
because the shell templates use bash's `${#array[@]}`, which would open a `{#` comment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

import nodeside

TEMPLATE_ROOT = Path(__file__).parent / "templates"
NODESIDE_ROOT = Path(nodeside.__file__).resolve().parent


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_ROOT)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        comment_start_string="{##",
        comment_end_string="##}",
    )


def render(name: str, **values: object) -> str:
    """Render the template `name` (relative to userdata/templates/) with `values`."""
    return environment().get_template(name).render(**values)


def verbatim(name: str) -> str:
    """The nodeside/ file `name` (relative to nodeside/), as the nodes get it."""
    return (NODESIDE_ROOT / name).read_text(encoding="utf-8")
