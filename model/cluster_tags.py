"""`tags`: the user's tags on every resource, beside the ones the program sets itself.

The program's own tag names (the node contract) are in model/tags.py.
"""

from __future__ import annotations

from model import aws_rules
from model import tags as node_tags
from model.paths import loc_to_path

# Tag keys the program sets itself: the most any one resource carries (an instance:
# Name and the node identity tags, model/tags.py, infra/nodes.py).
PROGRAM_TAG_KEYS = ("Name", *node_tags.NODE_IDENTITY, node_tags.BLOCK_END)


# An S3 object takes at most 10 tags [S3-OBJ-TAGS], while the config allows up to 44
# user tags (50 per resource minus the program's, [AWS-TAGS]).
MAX_OBJECT_TAGS = 10


def object_tags(tags: dict[str, str]) -> dict[str, str]:
    """The tags an S3 object (the node payload) carries: at most MAX_OBJECT_TAGS.

    The program's own tags first (GpuClusterName: which cluster the object belongs to),
    then the user's `tags` in key order (the order Pulumi hands the config to the
    program in), until there are 10. The bucket holding the object carries every tag
    (docs/operations.md, "Tags: which resource gets which").
    """
    own = [k for k in PROGRAM_TAG_KEYS if k in tags]
    user = sorted(k for k in tags if k not in own)
    return {k: tags[k] for k in (own + user)[:MAX_OBJECT_TAGS]}


def _tag_problem(key: str, value: str) -> str | None:
    problem = aws_rules.tag_key_problem(key)
    if problem is None and key in node_tags.NODE_IDENTITY + (node_tags.BLOCK_END,):
        problem = (
            f"tag key '{key}' is one the program sets on every node (the node reads it at boot, "
            "docs/node-contract.md); rename yours"
        )
    if problem is None and key == node_tags.DATA_REPOSITORY:
        problem = (
            f"tag key '{key}' is one the program sets on a file system linked to S3 (the policy pack "
            "exempts that file system from the final-backup check by it); rename yours"
        )
    if problem is None:
        problem = aws_rules.tag_value_problem(key, value)
    return problem


def tag_problems(tags: dict[str, str]) -> list[tuple[str, str]]:
    path = loc_to_path(("tags",))
    out = [(path, problem) for key, value in tags.items() if (problem := _tag_problem(key, value))]
    counted = {k for k in tags if not k.lower().startswith("aws:")} | set(PROGRAM_TAG_KEYS)
    if len(counted) > aws_rules.MAX_TAGS_PER_RESOURCE:
        room = aws_rules.MAX_TAGS_PER_RESOURCE - len(PROGRAM_TAG_KEYS)
        out.append(
            (
                path,
                f"{len(tags)} tags plus the {len(PROGRAM_TAG_KEYS)} the program puts on every instance "
                f"({', '.join(PROGRAM_TAG_KEYS)}) make {len(counted)}; AWS allows "
                f"{aws_rules.MAX_TAGS_PER_RESOURCE} per resource [AWS-TAGS]: keep at most {room} tags here",
            )
        )
    return out
