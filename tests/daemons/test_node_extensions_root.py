"""Node extension hooks where they need root (mount namespace); the rest is tests/infra/test_node_extensions.py."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.hook_box import HookBox


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespace)")
def test_failed_hook_on_fsx_markers(tmp_path):
    box = HookBox(tmp_path)
    box.hook("exit 5")
    r = box.boot(mount_fsx=True)
    assert r.returncode == 1
    m = box.marker("ip-10-0-0-5")
    assert (m["step"], m["state"]) == ("99-on-node-ready", "failed")
    assert m["reason"].startswith("hooks.on_node_ready exited with status 5")
    hook = json.loads((box.markers / "ip-10-0-0-5.json").read_text())
    assert hook == box.hook_marker() and (hook["state"], hook["exit_status"]) == ("failed", 5)
