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
# The health program's memory between runs: where it stopped reading the XID source and
# the XID faults still outstanding (a new instance starts without any).
HEALTH_STATE = f"{STATE_DIR}/health-state.json"

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


def validation_results(cluster: str) -> str:
    return f"{fsx_root(cluster)}/validation/"
