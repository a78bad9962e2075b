"""The controller reads the block ends the program publishes (nodeside/lib/block-end.sh
block_end_fetch): a running node never sees new Auto Scaling tags, so after an extension
only this object says the block's new end (issue 17, D3).

Driven in the shell that runs it, with a fake `aws` CLI and a fake clock (bash's
SECONDS, assigned between calls of one shell), never a real wait.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from model.block_ends import BLOCK_ENDS_KEY, block_ends_document
from model.config import parse_config
from tests.support.block_end import SYSTEM_PATH, _sh
from tests.support.mocks import valid_raw

CR_A, CR_B = "cr-0123456789abcdef0", "cr-0fedcba9876543210"
OLD, NEW = "2026-12-08T11:30:00Z", "2026-12-15T11:30:00Z"

# A fake AWS CLI: records its arguments, then serves FAKE_S3_FILE as the object (or fails
# the way the real one does when FAKE_S3_FAIL is a file holding the error).
FAKE_AWS = r"""#!/bin/bash
printf '%s\n' "$*" >>"$FAKE_AWS_LOG"
if [[ -s $FAKE_S3_FAIL ]]; then cat "$FAKE_S3_FAIL" >&2; exit 1; fi
[[ "$1 $2" == "s3 cp" ]] || exit 2
cp "$FAKE_S3_FILE" "${@: -1}"
"""


def doc(blocks: dict[str, tuple[str, str]], cluster: str = "t1", fmt: int = 1) -> str:
    body = {
        "format": fmt,
        "cluster": cluster,
        "blocks": {n: {"end": e, "reservation_id": r} for n, (r, e) in blocks.items()},
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


class Box:
    """FSX_ROOT, the object's file, and the fake CLI."""

    def __init__(self, tmp: Path):
        self.fsx = tmp / "fsx"
        self.fsx.mkdir()
        self.blocks = self.fsx / "blocks"
        self.obj = tmp / "ends.json"
        self.fail = tmp / "fail"
        self.log = tmp / "aws.log"
        self.bin = tmp / "bin"
        self.bin.mkdir()
        (self.bin / "aws").write_text(FAKE_AWS)
        (self.bin / "aws").chmod(0o755)

    def env(self, uri: str) -> dict[str, str]:
        return {
            "FSX_ROOT": str(self.fsx),
            "CLUSTER_NAME": "t1",
            "BLOCK_ENDS_URI": uri,
            "BLOCK_ENDS_REGION": "us-east-2",
            "BLOCK_ENDS_INTERVAL": "300",
            "GC_STEP": "agent",
            "FAKE_S3_FILE": str(self.obj),
            "FAKE_S3_FAIL": str(self.fail),
            "FAKE_AWS_LOG": str(self.log),
        }

    def run(self, script: str, uri: str = f"s3://bucket-1/{BLOCK_ENDS_KEY}") -> list[str]:
        r = _sh(script, env=self.env(uri), path_first=str(self.bin))
        assert r.stderr == ""
        return [re.sub(r"^\S+ \[agent\] ", "", ln) for ln in r.stdout.splitlines()]

    def end(self, block: str) -> str:
        return (self.blocks / f"{block}.end").read_text()


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


URI = f"s3://bucket-1/{BLOCK_ENDS_KEY}"


def test_an_extension_in_the_object_overwrites_the_tag_published_end(box):
    box.blocks.mkdir()
    (box.blocks / "a.end").write_text(OLD + "\n")  # what the nodes' tags said at boot
    box.obj.write_text(doc({"a": (CR_A, NEW)}))
    said = box.run("SECONDS=1000; block_end_fetch")
    assert said == [
        f"reading the published block ends from {URI} (1 block(s))",
        f"capacity block a ({CR_A}) ends {NEW}, not {OLD}: from {URI}, written to {box.blocks}/a.end",
    ]
    assert box.end("a") == NEW + "\n"
    assert oct((box.blocks / "a.end").stat().st_mode & 0o777) == "0o644"
    # The instance role reads it with the CLI, in the bucket's region (S3 gateway endpoint).
    (call,) = box.log.read_text().splitlines()
    assert re.fullmatch(rf"s3 cp --only-show-errors --region us-east-2 {re.escape(URI)} /\S+", call), call


def test_the_object_is_read_at_most_once_per_interval(box):
    box.obj.write_text(doc({"a": (CR_A, OLD)}))
    script = (
        "SECONDS=1000; block_end_fetch; "
        f"printf '%s' '{doc({'a': (CR_A, NEW)})}' >'{box.obj}'; "
        'SECONDS=1299; block_end_fetch; echo "at 1299: $(cat $FSX_ROOT/blocks/a.end)"; '
        "SECONDS=1300; block_end_fetch"
    )
    said = box.run(script)
    assert said == [
        f"reading the published block ends from {URI} (1 block(s))",
        f"capacity block a ({CR_A}) ends {OLD}, not (unpublished): from {URI}, written to {box.blocks}/a.end",
        f"at 1299: {OLD}",
        f"capacity block a ({CR_A}) ends {NEW}, not {OLD}: from {URI}, written to {box.blocks}/a.end",
    ]
    assert len(box.log.read_text().splitlines()) == 2  # 1000 and 1300, not 1299


def test_the_program_is_authoritative_even_for_an_earlier_end(box):
    """A new block reusing an old name: the old block's later end must not survive."""
    box.blocks.mkdir()
    (box.blocks / "a.end").write_text(NEW + "\n")
    (box.blocks / "gone.end").write_text(OLD + "\n")  # a block the program no longer declares
    box.obj.write_text(doc({"a": (CR_B, OLD)}))
    said = box.run("SECONDS=1000; block_end_fetch")
    assert said[-1] == f"capacity block a ({CR_B}) ends {OLD}, not {NEW}: from {URI}, written to {box.blocks}/a.end"
    assert (box.end("a"), box.end("gone")) == (OLD + "\n", OLD + "\n")
    assert box.run("SECONDS=1000; block_end_fetch") == [f"reading the published block ends from {URI} (1 block(s))"]


def test_an_unreadable_object_keeps_the_files_and_is_said_once_per_state_change(box):
    box.blocks.mkdir()
    (box.blocks / "a.end").write_text(OLD + "\n")
    box.obj.write_text(doc({"a": (CR_A, NEW)}))
    box.fail.write_text("fatal error: An error occurred (403) when calling the HeadObject operation: Forbidden\n")
    script = (
        "SECONDS=1000; block_end_fetch; SECONDS=1300; block_end_fetch; "  # twice denied: said once
        f"rm '{box.fail}'; SECONDS=1600; block_end_fetch; SECONDS=1900; block_end_fetch; "  # readable
        f"echo denied >'{box.fail}'; SECONDS=2200; block_end_fetch"  # denied again: said again
    )
    said = box.run(script)
    denied = (
        f"WARNING: cannot read the published block ends {URI}: fatal error: An error occurred (403) when calling "
        "the HeadObject operation: Forbidden; the block ends the nodes published stay in force"
    )
    assert said == [
        denied,
        f"reading the published block ends from {URI} (1 block(s))",
        f"capacity block a ({CR_A}) ends {NEW}, not {OLD}: from {URI}, written to {box.blocks}/a.end",
        f"WARNING: cannot read the published block ends {URI}: denied; the block ends the nodes published stay in force",
    ]
    assert len(box.log.read_text().splitlines()) == 5


@pytest.mark.parametrize(
    "content,why",
    [
        ("not json", "not JSON (Expecting value: line 1 column 1 (char 0))"),
        (doc({"a": (CR_A, NEW)}, cluster="other"), "for cluster 'other', not 't1'"),
        (doc({"a": (CR_A, NEW)}, fmt=2), "not format 1 of the block ends (a newer program? update the node files)"),
        (doc({"../x": (CR_A, NEW)}), "block name '../x' is not a block name"),
        (doc({"a": ("cr-; rm -rf /", NEW)}), "block a: reservation_id 'cr-; rm -rf /' is not a cr- id"),
        (
            doc({"a": (CR_A, "2026-12-15T11:30:00+01:00")}),
            "block a: end '2026-12-15T11:30:00+01:00' is not a UTC time like 2026-12-08T11:30:00Z",
        ),
        (doc({"a": (CR_A, NEW)}) + " " * 70000, "larger than 65536 bytes"),
        ('{"format": 1, "cluster": "t1", "blocks": []}\n', "has no blocks mapping"),
    ],
)
def test_a_bad_document_changes_nothing(box, content, why):
    box.blocks.mkdir()
    (box.blocks / "a.end").write_text(OLD + "\n")
    box.obj.write_text(content)
    said = box.run("SECONDS=1000; block_end_fetch")
    assert said == [
        f"WARNING: ignoring the published block ends {URI}: {why}; the block ends the nodes published stay in force"
    ]
    assert sorted(p.name for p in box.blocks.iterdir()) == ["a.end"] and box.end("a") == OLD + "\n"


def test_a_local_cluster_reads_a_file_uri_and_no_uri_reads_nothing(box):
    box.obj.write_text(doc({"a": (CR_A, NEW), "b": (CR_B, OLD)}))
    said = box.run("SECONDS=1000; block_end_fetch", uri=f"file://{box.obj}")
    assert said[0] == f"reading the published block ends from file://{box.obj} (2 block(s))"
    assert (box.end("a"), box.end("b")) == (NEW + "\n", OLD + "\n")
    assert not box.log.exists()  # no AWS CLI for a file
    (box.blocks / "a.end").unlink()
    assert box.run("SECONDS=1000; block_end_fetch", uri="") == []
    assert not (box.blocks / "a.end").exists()


@pytest.mark.skipif(
    any(Path(d, "aws").exists() for d in [*SYSTEM_PATH.split(":"), "/usr/local/bin", "/snap/bin"]),
    reason="a real AWS CLI is installed on this host",
)
def test_without_the_aws_cli_the_failure_names_it(box):
    (box.bin / "aws").unlink()
    box.obj.write_text(doc({"a": (CR_A, NEW)}))
    assert box.run("SECONDS=1000; block_end_fetch") == [
        f"WARNING: cannot read the published block ends {URI}: the AWS CLI (aws) is not installed; "
        "the block ends the nodes published stay in force"
    ]


def test_the_program_s_document_is_what_the_node_reads(box):
    """The contract: model/block_ends.py writes what block_end_parse accepts."""
    raw = valid_raw()
    raw["capacity"]["capacity_blocks"][0]["end"] = NEW
    cfg = parse_config(raw)
    box.obj.write_text(block_ends_document(cfg))
    said = box.run("SECONDS=1000; block_end_fetch", uri=f"file://{box.obj}")
    assert (
        said[-1]
        == f"capacity block a ({CR_A}) ends {NEW}, not (unpublished): from file://{box.obj}, written to {box.blocks}/a.end"
    )
