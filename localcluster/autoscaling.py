"""The lane's Auto Scaling: its groups, and the stand-in the controller's agents call.

On AWS every node is an instance of an Auto Scaling group (model/capacity.py node_groups:
`controller`, `block-<name>` per Capacity Block, `workers` on demand; named
`gpu-cluster-<stack>-<group>`, model/preflight.py asg_name). The lane keeps the same
groups: each machine it launches is added to its group in the stand-in's state
(localcluster/asg_standin.py), and the stand-in (localcluster/aws_standin.py, every request
checked against botocore's model) runs in the controller machine's network namespace on
127.0.0.1:PORT, which the controller's overrides.env names as AWS_ENDPOINT_URL_AUTO_SCALING
[SDK-ENDPOINT-ENV]; credentials come from the metadata stand-in's instance profile, as on
EC2. What Auto Scaling does after a terminate call (the instance goes, a new one from the
same template comes into the same group) is LocalCluster.follow_terminations.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from localcluster import asg_standin
from localcluster.nodes import NETNS_DIR, REPO, Node
from model import tags as node_tags
from model.preflight import asg_name

PORT = 4566  # inside the controller's namespace only
HANDLERS = "localcluster.asg_standin:handlers"


def endpoint() -> str:
    return f"http://127.0.0.1:{PORT}"


def group_of(cluster: str, role: str, block: str) -> str:
    """The Auto Scaling group a machine of this role and block belongs to."""
    if role == "controller":
        return asg_name(cluster, "controller")
    return asg_name(cluster, "workers" if block == node_tags.ON_DEMAND else f"block-{block}")


def state_dir(cluster_root: Path) -> Path:
    return Path(cluster_root) / "autoscaling"


def add(cluster_root: Path, cluster: str, node: Node) -> str:
    """Record a launched machine in its group; returns the group's name."""
    group = group_of(cluster, node.role, node.block)
    state_dir(cluster_root).mkdir(parents=True, exist_ok=True)
    asg_standin.add_instance(state_dir(cluster_root), group, node.instance_id)
    return group


def start(cluster_root: Path, controller: Node) -> int:
    """Serve the stand-in in the controller's network namespace; returns its pid (it dies
    with the namespace's processes when the controller machine is destroyed)."""
    state = state_dir(cluster_root)
    state.mkdir(parents=True, exist_ok=True)
    ready = state / "ready"
    ready.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [
            "nsenter",
            f"--net={NETNS_DIR / controller.netns}",
            sys.executable,
            "-m",
            "localcluster.aws_standin",
            "--state",
            str(state),
            "--handlers",
            HANDLERS,
            "--port",
            str(PORT),
            "--ready",
            str(ready),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(state / "standin.err", "w"),
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the Auto Scaling stand-in did not start: {(state / 'standin.err').read_text()[-800:]}")
        time.sleep(0.05)
    return proc.pid
