"""Where things live on a node: the one home of every path the node files use.

The renderers, the program's outputs, the local cluster and the tests take their paths
from here; the shell steps get the ones they need through cluster.env (rendered from
these constants), so a path is changed in one place. docs/node-contract.md describes
the same layout for people.
"""

from __future__ import annotations

# --- what the user data installs ------------------------------------------------------
HOME = "/opt/gpu-cluster"  # install prefix: bin/, steps/, lib/, templates/, validation/
ETC = "/etc/gpu-cluster"
BIN = f"{HOME}/bin"
STEPS = f"{HOME}/steps"
LIB = f"{HOME}/lib"
TEMPLATES = f"{HOME}/templates"  # config templates filled in at boot
VALIDATION = f"{HOME}/validation"

ENTRY_POINT = f"{BIN}/gpu-cluster-boot"
FETCH = f"{BIN}/gpu-cluster-fetch"
VALIDATION_CLI = f"{BIN}/gpu-cluster-validation"
# Slurm's HealthCheckProgram (nodeside/health.py) and the training launcher (nodeside/run.py).
HEALTH_PROGRAM = f"{BIN}/gpu-cluster-health"
RUN_LAUNCHER = f"{BIN}/gpu-cluster-run"
# The controller's repair agent (nodeside/repair.py), in lib/ beside the AWS client it imports.
REPAIR_PROGRAM = f"{LIB}/repair.py"
# The controller's deep DCGM runs on idle nodes (nodeside/dcgm_idle.py), beside repair.py it imports;
# its `run` half runs on the node under test, inside the run's reservation.
DCGM_IDLE_PROGRAM = f"{LIB}/dcgm_idle.py"
VALIDATION_JOB = f"{VALIDATION}/first-boot.sbatch"
CLUSTER_ENV = f"{ETC}/cluster.env"
# The one file a local node may have that an EC2 node never has (the documented swaps).
OVERRIDES_ENV = f"{ETC}/overrides.env"

# Programs and steps are executable; everything else is 0644.
EXECUTABLE_DIRS = (f"{BIN}/", f"{STEPS}/")

# --- config templates and system files ---------------------------------------------------
SLURM_CONF_TEMPLATE = f"{TEMPLATES}/slurm.conf"
PYXIS_CONF_TEMPLATE = f"{TEMPLATES}/pyxis.conf"
SLURMD_DEFAULT_TEMPLATE = f"{TEMPLATES}/slurmd.default"  # -> /etc/default/slurmd
JOB_TEMPLATES = f"{TEMPLATES}/jobs"
TOPOLOGY_CONF_TEMPLATE = f"{TEMPLATES}/topology.conf"  # -> /etc/slurm/topology.conf until the first refresh
TOPOLOGY_PROGRAM = f"{LIB}/topology.py"  # the controller's refresh (nodeside/topology.py)
CHECK_SLURMD_C = f"{LIB}/check-slurmd-c.sh"
SLURM_ETC = "/etc/slurm"
PLUGSTACK_CONF = f"{SLURM_ETC}/plugstack.conf"
PLUGSTACK_DIR = f"{SLURM_ETC}/plugstack.conf.d"
# Where `make install` of Pyxis puts the plugin: prefix /usr/local, libdir
# $(prefix)/lib, plugin dir $(libdir)/slurm (Pyxis Makefile).
PYXIS_PLUGIN = "/usr/local/lib/slurm/spank_pyxis.so"
LIMITS_FILE = "/etc/security/limits.d/90-gpu-cluster-memlock.conf"
LOGIND_DROPIN = "/etc/systemd/logind.conf.d/gpu-cluster.conf"
SYSTEMD_DIR = "/etc/systemd/system"
# cloud-init runs every executable here at each boot: what brings a rebooted node back.
PER_BOOT_SCRIPT = "/var/lib/cloud/scripts/per-boot/gpu-cluster-boot.sh"
MUNGE_KEY = "/etc/munge/munge.key"
# Step 20 installs these from templates/: no package upgrade restarts munge or Slurm, and
# unattended-upgrades leaves the kernel, the Lustre client and Slurm alone.
NEEDRESTART_DROPIN = "/etc/needrestart/conf.d/90-gpu-cluster.conf"
UNATTENDED_UPGRADES_DROPIN = "/etc/apt/apt.conf.d/51gpu-cluster-unattended-upgrades"

# --- private registries (only with `containers`; userdata/registries.py) ------------------
REGISTRIES_CONF = f"{ETC}/registries.conf"  # what to log in to: ECR hosts, secret ids
REGISTRY_LOGIN = f"{BIN}/gpu-cluster-registry-login"
# ENROOT_CONFIG_PATH for every user (an enroot.conf.d drop-in): Enroot reads the logins
# from `$ENROOT_CONFIG_PATH/.credentials` [ENROOT-IMPORT], as the job's user.
ENROOT_CONFIG_DIR = "/etc/enroot/config"
ENROOT_CREDENTIALS = f"{ENROOT_CONFIG_DIR}/.credentials"
ENROOT_CONF_DROPIN = "/etc/enroot/enroot.conf.d/90-gpu-cluster-registries.conf"

# --- state and logs ------------------------------------------------------------------
LOG_DIR = "/var/log/gpu-cluster"
STATE_DIR = "/var/lib/gpu-cluster"  # this node's own state; a new instance starts without it
BOOT_LOG = f"{LOG_DIR}/boot.log"
LOCAL_STATUS = f"{STATE_DIR}/status"
# The image's own files, not this node's state: they survive a bake's cleanup (the
# lanes' root manifest lives here too). sha256sum lines of what step 20 downloaded
# under a `record` pin (model/pins.py).
IMAGE_DIR = "/var/lib/gpu-cluster-image"
DOWNLOAD_RECORD = f"{IMAGE_DIR}/downloads.sha256"
# A baked image's manifest (nodeside/bake.py) and, beside it, manifest.json.sha256.
IMAGE_MANIFEST = f"{IMAGE_DIR}/manifest.json"
BAKE_PROGRAM = f"{BIN}/gpu-cluster-bake"
# How an image is baked, on an EC2 build instance (ops bake) and in a lane root alike:
# the very step 20 every node runs, in bake mode, then the bake's node state removed.
# NEEDRESTART_SUSPEND: needrestart's apt hook must not restart the services the bake
# itself runs under (cloud-final on EC2; the host's, seen through a lane's chroot) [NEEDRESTART].
BAKE_COMMAND = ("GPU_CLUSTER_BAKE=1", "NEEDRESTART_SUSPEND=1", ENTRY_POINT, "--only", "packages")
BAKE_CLEAN = (BAKE_PROGRAM, "clean")
# What this node booted from (manifest sha256, kernel), written by step 20 and put in
# the status marker by the entry point: `ops status` compares it with the pinned image.
NODE_IMAGE_ENV = f"{STATE_DIR}/image.env"
# boto3 for the controller's agents (nodeside/aws_client.py): its own virtualenv, part of
# the image (a bake installs it; it is not this node's state), with the hash-pinned
# versions of the requirements file step 20 installs from.
AWS_VENV = "/opt/gpu-cluster-aws"
AWS_PYTHON = f"{AWS_VENV}/bin/python3"
AWS_REQUIREMENTS = f"{TEMPLATES}/aws-requirements.txt"
AWS_CLIENT = f"{LIB}/aws_client.py"
# The health program's memory between runs: where it stopped reading the XID source and
# the XID faults still outstanding (a new instance starts without any).
HEALTH_STATE = f"{STATE_DIR}/health-state.json"

# --- accounting and users (only with `accounting`; userdata/accounting_files.py) -------
SLURMDBD_CONF_TEMPLATE = f"{TEMPLATES}/slurmdbd.conf"  # placeholders: no secret
SLURMDBD_CONF = "/etc/slurm/slurmdbd.conf"  # filled on the controller, root 0600
USERS_CONF = f"{ETC}/users.conf"  # the stack's users (model/users.py users_conf)
# Controller programs (stdlib Python; the secret read uses boto3 where it runs on AWS).
SLURMDBD_CONF_PROGRAM = f"{BIN}/gpu-cluster-slurmdbd-conf"
ACCOUNTING_SYNC = f"{BIN}/gpu-cluster-accounting-sync"

# --- logs and metrics in CloudWatch (`logs`; userdata/cloudwatch_agent.py) ---------------
# The agent's configuration as rendered (placeholders @NODE_NAME@ and @INSTANCE_ID@); step
# 25 fills them into the agent's own directory. The controller's adds its daemons' logs
# and the validation reports (the agent's append-config).
CLOUDWATCH_AGENT_NODE_CONFIG = f"{TEMPLATES}/cloudwatch-agent-node.json"
CLOUDWATCH_AGENT_CONTROLLER_CONFIG = f"{TEMPLATES}/cloudwatch-agent-controller.json"
CLOUDWATCH_AGENT_HOME = "/opt/aws/amazon-cloudwatch-agent"  # where the .deb installs it
CLOUDWATCH_AGENT_CTL = f"{CLOUDWATCH_AGENT_HOME}/bin/amazon-cloudwatch-agent-ctl"
CLOUD_INIT_OUTPUT_LOG = "/var/log/cloud-init-output.log"
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
SLURMD_LOG = "/var/log/slurm/slurmd.log"
SLURMDBD_LOG = "/var/log/slurm/slurmdbd.log"
# The controller's metrics program (boto3: GPU_CLUSTER_AWS_PYTHON), run by its agent loop.
CLUSTER_METRICS_PROGRAM = f"{LIB}/cluster_metrics.py"

# --- the stack's hook (hooks.on_node_ready); shipped only when the stack sets one ------
HOOKS = f"{HOME}/hooks"
ON_NODE_READY = f"{HOOKS}/on-node-ready"  # the stack's script, as given
ON_NODE_READY_STEP = f"{STEPS}/99-on-node-ready.sh"  # last step: runs it under `timeout`
ON_NODE_READY_LOG = "/var/log/gpu-cluster/on-node-ready.log"  # the hook's own output
ON_NODE_READY_STATUS = "/var/lib/gpu-cluster/on-node-ready.json"  # its last run, this node

# --- storage ---------------------------------------------------------------------------
FSX_MOUNTPOINT = "/fsx"
FSX_ROOT_FMT = f"{FSX_MOUNTPOINT}/.gpu-cluster/{{cluster}}"  # root-only (0700) cluster state
FSX_JOBS = f"{FSX_MOUNTPOINT}/jobs"  # users' job templates
# Node-local NVMe on the DLAMI; the fallback is on the root volume (step 60 says so).
NVME_MOUNT = "/opt/dlami/nvme"
ENROOT_FALLBACK_BASE = "/var/lib/gpu-cluster-enroot"


def fsx_root(cluster: str) -> str:
    """The cluster's directory on /fsx: Slurm state, munge exchange, status, validation."""
    return FSX_ROOT_FMT.format(cluster=cluster)


def hook_markers(cluster: str) -> str:
    """Per-node copies of ON_NODE_READY_STATUS on /fsx (`<node>.json`), for operators."""
    return f"{fsx_root(cluster)}/hooks/on-node-ready"


def health_records(cluster: str) -> str:
    """The health program's last run per node (`<node>.json`), read by `ops status`."""
    return f"{fsx_root(cluster)}/health"


def repair_records(cluster: str) -> str:
    """The repair agent's state.json and history.jsonl (nodeside/repair.py)."""
    return f"{fsx_root(cluster)}/repair"


def validation_results(cluster: str) -> str:
    return f"{fsx_root(cluster)}/validation/"
