"""Slurm configuration for gpu-cluster nodes: pure line builders and file renderer.

No pulumi import: the node renderer, the local cluster and the tests call this directly.
Logic lives here; the templates under `userdata/templates/slurm/` only place values.

Registration uses Slurm's *dynamic nodes* (22.05+): slurm.conf has no NodeName lines,
only `MaxNodeCount` and a partition with `Nodes=ALL`; every node starts
`slurmd -Z --conf "<node line>"` with its own IPv4 NodeAddr. Why:
- a node that replaces a failed one registers by itself; nobody edits slurm.conf or
  runs `scontrol reconfigure` on the controller: replacing a node is "launch the
  same template again" [SLURM-DYN];
- the user data carries no list of hostnames or addresses, so its bytes do not depend
  on the node count and every node of a template gets the same bytes (issue 3);
- the explicit `NodeAddr=<IPv4>` avoids the Ubuntu 24.04 pitfall where the hostname
  resolves to an IPv6 link-local address, and slurmd binds to it.
Measured on Debian's Slurm 22.05: the node registers with exactly the given NodeAddr.

Boot-time values are placeholders `@NAME@` (no `/`, `&`, `\\` or `|`, so a plain
`sed -e 's|@NAME@|value|g'` fills them): the controller's name and address and
MaxNodeCount in slurm.conf, the node's address and block in the slurmd --conf line.

Versions. The nodes run Ubuntu's Slurm 23.11; the tests run the files against Debian's
22.05.8 and, optionally, Debian 13's 24.11.5 in a chroot (tests/daemons/test_slurm_oracle.py),
and every key used here is accepted by both. Every key and value is also checked against
the table of what 23.11 accepts, taken from its release source (model/slurm_keys.py,
tests/userdata/test_slurm_conf_23_11.py). Differences this relies on:
- dynamic nodes exist since 22.05; `--conf` takes NodeAddr, CPUs/Boards/Sockets/Cores/
  Threads, RealMemory, Gres and Feature on all three (there is no `Dynamic=` key);
- the 22.05-23.x dynamic-node guide requires TreeWidth=65533 (no fanout through dynamic
  nodes); later guides drop the requirement, the value stays valid;
- CommunicationParameters=NoAddrCache is not set: newer Slurm calls it defunct and
  NodeAddr is an IPv4 literal anyway;
- PMIx: 22.05 here ships pmix_v4, Ubuntu's 23.11 and 24.11 pmix_v5; `srun --mpi=pmix`
  picks whichever is built, nothing in slurm.conf names it;
- CgroupPlugin=autodetect is accepted by 22.05 (it finds cgroup v1 on the test host)
  and selects cgroup/v2 on Ubuntu 24.04, where slurmd's unit must have Delegate=yes
  (the Debian/Ubuntu unit has it, and our drop-in sets it too) [SLURM-CGROUP-V2];
- `scontrol show config` prints MpiDefault=none as "(null)" from 24.11 on.

SlurmUser=root: slurmctld keeps its state under /fsx/.gpu-cluster/<cluster>, a
root-only (0700) directory (docs/node-contract.md) that also carries the munge key
exchange; running it as root avoids relaxing that mode or depending on the `slurm`
UID being the same in every image that ever mounts the file system.
"""

from __future__ import annotations

import re

from model.catalog import InstanceSpec
from model.health import HealthConfig
from userdata import layout, templating

# --- placeholders filled at boot ----------------------------------------------------

SLURM_PLACEHOLDERS: dict[str, str] = {
    "CONTROLLER_HOST": "@CONTROLLER_HOST@",  # short hostname of the controller node
    "CONTROLLER_ADDR": "@CONTROLLER_ADDR@",  # its private IPv4
    "MAX_NODES": "@MAX_NODES@",  # max_node_count(expected nodes), computed at boot
}
"""Placeholders in the slurm.conf template (/opt/gpu-cluster/templates/slurm.conf)."""

NODE_PLACEHOLDERS: dict[str, str] = {
    "NODE_ADDR": "@NODE_ADDR@",  # this node's private IPv4 (IMDS local-ipv4)
    "NODE_BLOCK": "@NODE_BLOCK@",  # GpuClusterBlock tag: block name or `on-demand`
}
"""Placeholders in the slurmd --conf line (slurmd_conf_arg)."""

# MaxNodeCount = 2 * N + 4 (N = expected nodes, GpuClusterNodes tag). On EC2 a
# replacement node comes up with a new address and therefore a new hostname
# (ip-a-b-c-d), i.e. a new dynamic node, while the failed one keeps its slot (DOWN)
# until `scontrol delete nodename=` removes it. 2N lets every node be replaced once
# before anyone cleans up; +4 covers small clusters replacing the same node repeatedly.
# The factor and spare reach the nodes through cluster.env; the one formula is the
# shell helper `max_node_count` in lib/common.sh, which step 50 runs at boot.
MAX_NODES_FACTOR = 2
MAX_NODES_SPARE = 4

# Job steps need a large locked-memory limit: EFA registers (pins) its buffers and
# fails with "ibv_reg_mr failed, got error (12)" under a low memlock [SLURM-MEMLOCK].
# slurmd runs with this limit and slurm.conf stops Slurm from copying the submitting
# shell's (often 8 MiB) limit into the job. A field report (not AWS or NCCL docs) tells
# of NCCL topology-search hangs on 256+ nodes with unlimited memlock, fixed with a large
# finite value (8388608 KiB); change it here if that is ever seen (bytes for systemd).
SLURMD_MEMLOCK = "infinity"
SLURMD_NOFILE = 131072


_CGROUP_PLUGINS = ("autodetect", "cgroup/v1", "cgroup/v2")
_FEATURE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_BLOCK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # config block names and `on-demand`


# --- pure helpers -------------------------------------------------------------------


def instance_type_feature(instance_type: str) -> str:
    """Node feature naming the instance type, e.g. `p5.48xlarge` (`--constraint=`)."""
    if not _FEATURE.match(instance_type):
        raise ValueError(f"'{instance_type}' cannot be a Slurm feature name")
    return instance_type


def node_conf_line(spec: InstanceSpec, node_addr: str, block: str, instance_type: str | None = None) -> str:
    """The node definition a dynamic slurmd registers with (`slurmd -Z --conf`).

    Topology and memory come from the catalog: slurmd -C must agree (the boot checks it
    with check-slurmd-c.sh), and RealMemory stays below what the OS reports so the node
    is not drained for "Low RealMemory". NodeName is not allowed in --conf: slurmd
    uses the hostname. `node_addr` and `block` may be the @NODE_ADDR@/@NODE_BLOCK@
    placeholders.
    """
    if block != NODE_PLACEHOLDERS["NODE_BLOCK"] and not _BLOCK.match(block):
        raise ValueError(f"'{block}' cannot be part of a Slurm feature name")
    features = f"block-{block},{instance_type_feature(instance_type or spec.name)}"
    parts = [
        f"NodeAddr={node_addr}",
        f"CPUs={spec.vcpus}",
        "Boards=1",
        f"SocketsPerBoard={spec.sockets}",
        f"CoresPerSocket={spec.cores_per_socket}",
        f"ThreadsPerCore={spec.threads_per_core}",
        f"RealMemory={spec.real_memory_mib}",
    ]
    if spec.gpus:
        parts.append(f"Gres=gpu:{spec.gpus}")
    parts.append(f"Feature={features}")
    return " ".join(parts)


def slurmd_conf_arg(
    spec: InstanceSpec, block: str = NODE_PLACEHOLDERS["NODE_BLOCK"], instance_type: str | None = None
) -> str:
    """The `--conf` string for `slurmd -Z`, with @NODE_ADDR@ (and by default
    @NODE_BLOCK@) left for the boot to fill; identical for every node of a template."""
    return node_conf_line(spec, NODE_PLACEHOLDERS["NODE_ADDR"], block, instance_type)


def def_cpu_per_gpu(spec: InstanceSpec) -> int | None:
    """DefCpuPerGPU: vCPUs / GPUs, so a GPU job that forgets --cpus-per-task still
    gets the CPUs EFA needs per rank (1 CPU per rank costs 4-10x bandwidth: the network
    stack is short of CPU to process packets).
    None on a GPU-less profile (the line is then omitted)."""
    return spec.cpus_per_gpu if spec.gpus else None


def gres_conf_lines(spec: InstanceSpec) -> list[str]:
    """gres.conf lines. No NodeName: with dynamic nodes each slurmd reads its own copy."""
    if not spec.gpus:
        return []
    last = spec.gpus - 1
    return [f"Name=gpu File=/dev/nvidia[0-{last}]" if last else "Name=gpu File=/dev/nvidia0"]


def state_save_location(cluster_name: str) -> str:
    """slurmctld state on /fsx, so a replaced controller resumes the queue."""
    return layout.fsx_root(cluster_name) + "/slurmctld"


def job_comp_loc(cluster_name: str) -> str:
    """Finished-job log on /fsx next to the state: survives a controller replacement."""
    return state_save_location(cluster_name) + "/jobcomp.log"


def health_settings(health: HealthConfig | None) -> list[tuple[str, str]]:
    """HealthCheckProgram, -Interval and -NodeState [SLURM-HEALTH]; none when disabled.

    slurmd runs the program as root on every node; it drains (and resumes) its own node
    with scontrol, so Slurm needs nothing else (docs/health.md)."""
    if health is None or not health.enabled:
        return []
    return [
        ("HealthCheckProgram", layout.HEALTH_PROGRAM),
        ("HealthCheckInterval", str(health.interval_seconds)),
        ("HealthCheckNodeState", health.node_state_value()),
    ]


def topology_settings(topology: str, switches_wait_minutes: int = 0) -> list[tuple[str, str]]:
    """TopologyPlugin for `slurm.topology` [SLURM-TOPO]: `tree` on every Slurm the nodes
    and tests run (22.05 has no topology/block; docs/topology.md says why tree fits EC2's
    layered network nodes better than block). With it, slurmctld and slurmd read
    topology.conf at start and at `scontrol reconfigure`, and stop when it is missing,
    so step 50 installs one on every node (lib/topology.sh).

    SchedulerParameters=max_switch_wait: Slurm cuts a job's `--switches=N@TIME` wait to
    this many seconds (300 by default; measured on 22.05: a 10-minute request shows as
    Switches=1@00:05:00), so it is raised to the job templates' wait."""
    if topology == "none":
        return []
    if topology != "tree":
        raise ValueError(f"topology must be tree or none, got {topology!r}")
    out = [("TopologyPlugin", "topology/tree")]
    if switches_wait_minutes > 0:
        out.append(("SchedulerParameters", f"max_switch_wait={switches_wait_minutes * 60}"))
    return out


def with_max_switch_wait(
    program: list[tuple[str, str]], custom: list[tuple[str, str]]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(program settings, custom settings) with one SchedulerParameters line: the stack's
    own (`slurm.custom_settings`) with the program's max_switch_wait added, unless it sets
    max_switch_wait itself; the program's line alone when the stack has none."""
    ours = next((v for k, v in program if k == "SchedulerParameters"), None)
    theirs = next((v for k, v in custom if k.lower() == "schedulerparameters"), None)
    if ours is None or theirs is None:
        return program, custom
    merged = theirs if "max_switch_wait=" in theirs else f"{theirs},{ours}"
    program = [(k, v) for k, v in program if k != "SchedulerParameters"]
    return program, [(k, merged if k.lower() == "schedulerparameters" else v) for k, v in custom]


def topology_conf_template() -> str:
    """The topology.conf a node starts with before the controller's first refresh: no
    switch at all, which Slurm reads as "no topology" (every node schedulable together)."""
    return (
        "# Generated by gpu-cluster (userdata/slurm_conf.py); replaced on the controller by\n"
        "# lib/topology.py from EC2 DescribeInstanceTopology. No switch yet: Slurm schedules\n"
        "# as without a topology until the first refresh (docs/topology.md).\n"
    )


def slurm_conf_settings(
    cluster_name: str,
    spec: InstanceSpec,
    health: HealthConfig | None = None,
    accounting: list[tuple[str, str]] | None = None,
    topology: str = "none",
    switches_wait_minutes: int = 0,
) -> list[tuple[str, str]]:
    """slurm.conf KEY=value pairs in file order (the partition line is placed by the template)."""
    placeholder = SLURM_PLACEHOLDERS
    settings = [
        ("ClusterName", cluster_name),
        ("SlurmctldHost", f"{placeholder['CONTROLLER_HOST']}({placeholder['CONTROLLER_ADDR']})"),
        ("SlurmUser", "root"),
        ("AuthType", "auth/munge"),
        ("MpiDefault", "none"),
        ("ProctrackType", "proctrack/cgroup"),
        ("TaskPlugin", "task/cgroup,task/affinity"),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_Core"),
        ("GresTypes", "gpu"),
    ]
    dcpg = def_cpu_per_gpu(spec)
    if dcpg is not None:
        settings.append(("DefCpuPerGPU", str(dcpg)))
    settings += [
        ("MaxNodeCount", placeholder["MAX_NODES"]),
        # Slurm 22.05-23.11 cannot fan messages out through dynamic nodes: disable fanout.
        ("TreeWidth", "65533"),
        # No CommunicationParameters=NoAddrCache: NodeAddr is an IPv4 literal (nothing
        # to re-resolve), and newer Slurm reports the option as defunct.
        ("ReturnToService", "2"),
        # Slurm's default, set explicitly because the job templates and gpu-cluster-run
        # rely on it: a batch job whose node fails (or `scontrol requeue`) goes back to
        # the queue instead of failing [SLURM-HEALTH, SLURM-SBATCH].
        ("JobRequeue", "1"),
        ("PropagateResourceLimitsExcept", "MEMLOCK"),
        ("PlugStackConfig", layout.PLUGSTACK_CONF),
        ("StateSaveLocation", state_save_location(cluster_name)),
        ("SlurmdSpoolDir", "/var/spool/slurmd"),
        ("SlurmctldPidFile", "/run/slurmctld.pid"),
        ("SlurmdPidFile", "/run/slurmd.pid"),
        ("SlurmctldLogFile", layout.SLURMCTLD_LOG),
        ("SlurmdLogFile", layout.SLURMD_LOG),
        ("SlurmctldDebug", "info"),
        ("SlurmdDebug", "info"),
        ("SlurmctldTimeout", "300"),
        ("SlurmdTimeout", "300"),
        ("MinJobAge", "600"),
        # No mail relay on the nodes; without this Slurm 23.x+ logs "Configured
        # MailProg is invalid" at every start and --mail-type silently fails anyway.
        ("MailProg", "/bin/true"),
        ("JobCompType", "jobcomp/filetxt"),
        ("JobCompLoc", job_comp_loc(cluster_name)),
    ]
    # `accounting` (userdata/accounting_files.py accounting_settings) replaces nothing
    # above: the finished-job log on /fsx stays beside slurmdbd's records.
    return settings + health_settings(health) + (accounting or []) + topology_settings(topology, switches_wait_minutes)


def partition_line(partition: str, default_time_minutes: int = 60) -> str:
    """The default partition; Nodes=ALL takes in every dynamic node as it registers.

    DefaultTime: a job without --time would otherwise get MaxTime (INFINITE), and on a
    Capacity Block cluster the block-end maintenance reservation (lib/block-end.sh)
    exists from the first boot, so such a job could never start on the block's nodes.
    """
    if default_time_minutes < 1:
        raise ValueError(f"default_time_minutes must be >= 1, got {default_time_minutes}")
    return (
        f"PartitionName={partition} Nodes=ALL Default=YES DefaultTime={default_time_minutes} MaxTime=INFINITE State=UP"
    )


def check_values(spec: InstanceSpec) -> dict[str, int]:
    """What lib/check-slurmd-c.sh compares with `slurmd -C` (all exactly but RealMemory,
    which is a floor)."""
    return {
        "CPUs": spec.vcpus,
        "Boards": 1,
        "SocketsPerBoard": spec.sockets,
        "CoresPerSocket": spec.cores_per_socket,
        "ThreadsPerCore": spec.threads_per_core,
        "RealMemory": spec.real_memory_mib,
    }


def node_hardware(spec: InstanceSpec) -> str:
    """cluster.env's SLURM_NODE_HARDWARE: check_values as `KEY=value ...`, in slurmd -C order."""
    return " ".join(f"{key}={value}" for key, value in check_values(spec).items())


# --- rendering ----------------------------------------------------------------------


def _render(template: str, **values: object) -> str:
    header = f"Generated by gpu-cluster from {template}; do not edit"
    return templating.render(template, header=header, **values)


def render_slurm_files(
    cluster_name: str,
    partition: str,
    spec: InstanceSpec,
    cgroup_plugin: str = "autodetect",
    default_time_minutes: int = 60,
    pyxis_plugin_path: str = layout.PYXIS_PLUGIN,
    health: HealthConfig | None = None,
    topology: str = "none",
    switches_wait_minutes: int = 0,
    accounting: list[tuple[str, str]] | None = None,
    custom: list[tuple[str, str]] | None = None,
    more_partitions: list[str] | None = None,
) -> dict[str, str]:
    """Every Slurm-related file a node gets, keyed by absolute node path.

    `cgroup_plugin`: `autodetect` on the nodes (Ubuntu 24.04, cgroup v2); the local
    test host has a cgroup v1 hierarchy and passes `cgroup/v1` [SLURM-CGROUP].
    Paths under /opt/gpu-cluster/templates still hold placeholders (see module doc).
    lib/check-slurmd-c.sh ships verbatim with the boot files; it reads what to compare
    from cluster.env (node_hardware). `health`: the stack's `health` section (None: no
    HealthCheck lines, as for the local test clusters that run no health program).
    `topology`: `slurm.topology` (`none` for test clusters that load no topology plugin);
    `switches_wait_minutes`: the job templates' `--switches` wait (max_switch_wait).
    `custom`: `slurm.custom_settings` (after the program's own settings; model/slurm.py
    refuses the keys the program writes); `more_partitions`: the NodeSet and PartitionName
    lines of `slurm.partitions` (model/slurm.py partition_lines).
    """
    if cgroup_plugin not in _CGROUP_PLUGINS:
        raise ValueError(f"cgroup_plugin must be one of {', '.join(_CGROUP_PLUGINS)}, got {cgroup_plugin!r}")
    if not pyxis_plugin_path.startswith("/"):
        raise ValueError(f"pyxis_plugin_path must be absolute, got {pyxis_plugin_path!r}")
    limits = {"memlock": SLURMD_MEMLOCK, "nofile": SLURMD_NOFILE}
    return {
        layout.SLURM_CONF_TEMPLATE: _render(
            "slurm/slurm.conf.j2",
            settings=sum(
                with_max_switch_wait(
                    slurm_conf_settings(cluster_name, spec, health, accounting, topology, switches_wait_minutes),
                    custom or [],
                ),
                [],
            ),
            partition_lines=[partition_line(partition, default_time_minutes), *(more_partitions or [])],
        ),
        f"{layout.SLURM_ETC}/gres.conf": _render("slurm/gres.conf.j2", lines=gres_conf_lines(spec)),
        f"{layout.SLURM_ETC}/cgroup.conf": _render("slurm/cgroup.conf.j2", cgroup_plugin=cgroup_plugin),
        layout.PLUGSTACK_CONF: _render("slurm/plugstack.conf.j2", plugstack_dir=layout.PLUGSTACK_DIR),
        layout.PYXIS_CONF_TEMPLATE: _render("slurm/pyxis.conf.j2", plugin_path=pyxis_plugin_path),
        f"{layout.SYSTEMD_DIR}/slurmd.service.d/gpu-cluster.conf": _render(
            "slurm/slurmd-override.conf.j2", daemon="slurmd", **limits
        ),
        f"{layout.SYSTEMD_DIR}/slurmctld.service.d/gpu-cluster.conf": _render(
            "slurm/slurmd-override.conf.j2", daemon="slurmctld", **limits
        ),
        layout.SLURMD_DEFAULT_TEMPLATE: _render("slurm/slurmd-default.j2", conf_line=slurmd_conf_arg(spec)),
        layout.LOGIND_DROPIN: _render("slurm/logind-removeipc.conf.j2"),
    } | ({layout.TOPOLOGY_CONF_TEMPLATE: topology_conf_template()} if topology != "none" else {})
