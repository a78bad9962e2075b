"""Golden copies of everything a node gets, per catalog instance type.

tests/golden/userdata/<instance-type>/
  user-data.gz      the exact bytes EC2 gets (before base64)
  s3-payload.sha256 digest of the S3 payload
  files/<node path> every rendered file (NodeFiles.files) that differs between types
tests/golden/userdata/common/files/<node path>
  the files every catalog type gets byte for byte, kept once so that a change to them
  is one diff in review, not one per instance type
Any change to a template, a renderer or the catalog shows up here as a reviewable diff.
Rewrite on purpose with `pytest tests/userdata/test_userdata_golden.py --update-golden`.
"""

from __future__ import annotations

import shutil
from functools import lru_cache
from pathlib import Path

import pytest

from model.catalog import CATALOG, SUPPORTED_INSTANCE_TYPES
from model.config import parse_config
from userdata.render import FsxEndpoint, render_userdata

GOLDEN = Path(__file__).parents[1] / "golden" / "userdata"
FSX = FsxEndpoint(dns_name="fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com", mount_name="abcdefgh")
URI = "s3://demo-bucket/gpu-cluster/demo/payload-{sha256}.tar.gz"


def _render(instance_type: str) -> dict[str, bytes]:
    cfg = parse_config(
        {
            "name": "demo",
            "instance_type": instance_type,
            "network": {"availability_zone": "us-east-2b"},
            "capacity": {"nodes": 4},
        }
    )
    nf = render_userdata(cfg, CATALOG[instance_type], FSX, URI)
    out = {"user-data.gz": nf.user_data, "s3-payload.sha256": (nf.s3_payload[0] + "\n").encode()}
    out.update({f"files{path}": content for path, content in nf.files.items()})
    return out


COMMON = GOLDEN / "common"


@lru_cache(maxsize=1)
def _common() -> dict[str, bytes]:
    """Node files every catalog type renders identically."""
    renders = [_render(t) for t in SUPPORTED_INSTANCE_TYPES]
    first = renders[0]
    return {
        rel: content
        for rel, content in first.items()
        if rel.startswith("files/") and all(r.get(rel) == content for r in renders[1:])
    }


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)


def _read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("instance_type", SUPPORTED_INSTANCE_TYPES)
def test_golden(instance_type, update_golden):
    rendered = _render(instance_type)
    root = GOLDEN / instance_type
    if update_golden:
        common = _common()
        _write_tree(COMMON, common)
        _write_tree(root, {rel: c for rel, c in rendered.items() if rel not in common})
        return
    assert root.is_dir() and COMMON.is_dir(), f"no golden files for {instance_type}: run pytest --update-golden"
    own = _read_tree(root)
    on_disk = {**_read_tree(COMMON), **own}
    assert not set(own) & set(_read_tree(COMMON)), "a file is both common and per type: --update-golden"
    assert sorted(on_disk) == sorted(rendered), "rendered file set changed: review, then --update-golden"
    changed = [rel for rel in rendered if rendered[rel] != on_disk[rel]]
    # Node files first, so the failure shows the diff of what actually changed.
    for rel in sorted(changed, key=lambda r: (not r.startswith("files/"), r)):
        if not rel.endswith(".gz"):
            assert rendered[rel].decode() == on_disk[rel].decode(), f"{instance_type}/{rel} changed"
    assert changed == [], f"{instance_type}: {changed} changed; review, then --update-golden"
