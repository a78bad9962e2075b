"""`slurm.partitions` against real slurmctld/slurmd (Debian's 22.05; a sysroot's 24.11 too).

The NodeSet and PartitionName lines as model/slurm.py renders them are appended to the
rendered slurm.conf (as the template places them); a dynamic node registering with block
`a`'s feature joins the per-block partition through its NodeSet and runs a job there, the
debug partition has its MaxTime (a longer job waits with PartitionTimeLimit), and a
partition over another block's NodeSet is empty.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from model.slurm import PartitionConfig, SlurmConfig, partition_lines
from tests.support.slurm_harness import (
    SlurmLayout,
    host_short_name,
    missing_prerequisites,
    start_host_cluster,
    sysroot_params,
)

_why = missing_prerequisites()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_why is not None, reason=_why or "")]

SLURM = SlurmConfig(
    partitions=(
        PartitionConfig(name="blocka", blocks=("a",)),
        PartitionConfig(name="blockb", blocks=("b",)),
        PartitionConfig(name="debug", max_time_minutes=30, default_time_minutes=10),
    )
)


@pytest.fixture(params=sysroot_params())
def where(request, tmp_path):
    """(layout, sysroot): this host's Slurm 22.05, or a sysroot's (Debian 13: 24.11)."""
    sysroot = request.param
    if sysroot is None:
        yield SlurmLayout(tmp_path), None
        return
    host_dir = Path(tempfile.mkdtemp(prefix="gpu-cluster-parts-", dir=sysroot / "tmp"))
    yield SlurmLayout(Path("/") / host_dir.relative_to(sysroot)), sysroot
    shutil.rmtree(host_dir, ignore_errors=True)


def test_a_dynamic_node_joins_its_blocks_partition_through_the_nodeset(where):
    layout, sysroot = where
    lines = partition_lines(SLURM)
    c = start_host_cluster(layout, "parts", conf_edit=lambda text: text + "\n".join(lines) + "\n", sysroot=sysroot)
    try:
        node = host_short_name()
        nodes = {
            p: c.run("sinfo", "-h", "-p", p, "-o", "%N").stdout.strip() for p in ("train", "blocka", "blockb", "debug")
        }
        assert nodes == {"train": node, "blocka": node, "blockb": "", "debug": node}, nodes
        debug = c.run("scontrol", "-o", "show", "partition", "debug").stdout
        assert "MaxTime=00:30:00" in debug and "DefaultTime=00:10:00" in debug, debug
        r = c.run("srun", "-p", "blocka", "-N1", "--time=1", "hostname", timeout=60)
        assert (r.returncode, r.stdout.strip()) == (0, node), r.stderr
        # Over the debug partition's MaxTime: queued, never started (EnforcePartLimits is
        # not set, so Slurm keeps the job pending with the reason instead of refusing it).
        r = c.run("sbatch", "--parsable", "-p", "debug", "--time=31", "--wrap", "true")
        job = r.stdout.strip().split(";")[0]
        show = c.run("scontrol", "-o", "show", "job", job).stdout
        # 22.05 names the reason PartitionConfig (seen on this host), later Slurm PartitionTimeLimit
        assert "JobState=PENDING" in show and re.search(r"Reason=Partition(TimeLimit|Config)\b", show), show
    finally:
        c.stop()
