"""A baked image as `ops` sees it: the manifest a bake prints and the tags its AMI gets
(nodeside/bake.py), for this repository's own pins unless a test changes them."""

from __future__ import annotations

import hashlib
import json

from model.pins import CLOUDWATCH_AGENT_VERSION, PRODUCT
from nodeside import bake

KERNEL = "6.8.0-1015-aws"


def manifest(**versions: str) -> dict:
    return {
        "format": 1,
        "baked": "2026-12-01T12:09:00Z",
        "os": "Ubuntu 24.04.1 LTS",
        "kernel": KERNEL,
        "lustre": {
            "kernel": KERNEL,
            "module": f"/lib/modules/{KERNEL}/updates/fs/lustre/lustre.ko",
            "vermagic": KERNEL,
            "utils": "2.15.6-1fsx8",
        },
        "pins": {},
        "versions": {
            "kernel": KERNEL,
            "slurm": "23.11.4-1.2ubuntu5",
            "enroot": PRODUCT.enroot_version,
            "pyxis": PRODUCT.pyxis_version,
            "lustre": "2.15.6-1fsx8",
            "munge": "0.5.15-4build1",
            "pmix": "5.0.1-4.1build1",
            "cwagent": CLOUDWATCH_AGENT_VERSION,
            **versions,
        },
        "packages": {},
        "held": [],
        "downloads": {d.file: hashlib.sha256(d.file.encode()).hexdigest() for d in PRODUCT.downloads},
        "dropins": {},
    }


def digest(m: dict) -> str:
    return hashlib.sha256(bake.manifest_bytes(m)).hexdigest()


def result_line(m: dict) -> str:
    return f"{bake.RESULT_MARK} " + json.dumps({"manifest_sha256": digest(m), "manifest": m}, sort_keys=True)


def tags(m: dict | None = None) -> list[dict[str, str]]:
    """The AMI's tags (DescribeImages form)."""
    m = m or manifest()
    return [{"Key": k, "Value": v} for k, v in bake.image_tags(m, digest(m)).items()]
