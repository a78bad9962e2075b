"""Instance tag names: the program, the boot and the local cluster use the same set."""

from __future__ import annotations

import re

import pytest

from model import tags
from userdata import layout
from userdata.render import boot_files


def test_step_10_reads_exactly_the_identity_tags():
    step = boot_files()[f"{layout.STEPS}/10-identity.sh"]
    required = re.findall(r"\$\(tag (Gpu[A-Za-z]+)\)", step)
    every = re.findall(r"\$\(tag[a-z_]* (Gpu[A-Za-z]+)\)", step)
    assert required == list(tags.NODE_IDENTITY)
    assert sorted(set(every)) == sorted({*tags.NODE_IDENTITY, tags.BLOCK_END})


def test_identity_tags():
    assert tags.identity_tags("c1", "worker", 4, "a") == {
        "GpuClusterName": "c1",
        "GpuClusterRole": "worker",
        "GpuClusterNodes": "4",
        "GpuClusterBlock": "a",
    }
    with pytest.raises(ValueError, match="role"):
        tags.identity_tags("c1", "head", 4, "a")


def test_tag_keys_are_allowed_in_instance_metadata():
    # EC2 refuses launches whose metadata-visible tag keys hold spaces or `/` [EC2-IMDS-TAGS].
    for key in (*tags.NODE_IDENTITY, tags.BLOCK_END):
        assert re.fullmatch(r"[A-Za-z0-9+\-=.,_:@]+", key), key
