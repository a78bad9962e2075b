"""Stand-in GPU and EFA hardware for lane nodes, and faults injected through it.

A lane node has no GPU and no EFA device, and its kernel log is the host's (shared by
every machine on this host). The health program (nodeside/health.py) reads its facts
through tools and files, so a lane node gets stand-ins for exactly those, and a fault
is a change to what they report, on one node only:
- `nvidia-smi` (/usr/local/bin, on the PATH slurmd gives the program): `-L`, the PCIe
  query and `-q -d ECC,ROW_REMAPPER`, answering from files under HARDWARE_DIR (`gpus`,
  `pcie`, `remap_pending`, `dram_uncorr`); HEALTH_GPUS in overrides.env says how many
  GPUs the check expects, while Slurm's gres stays empty (the node has none to bind);
- an EFA device tree in sysfs's layout (`<dev>/ports/1/state`), which the check reads
  through HEALTH_SYSFS_INFINIBAND, and HEALTH_EFA_COUNT devices expected;
- the node's own copy of a kernel log (HEALTH_XID_SOURCE), to which an XID line is
  appended as the NVIDIA driver writes it [NV-XID];
- /fsx itself: made read-only inside that one machine (a remount of its bind mount).
Every value is a documented overrides.env key (docs/node-contract.md); nothing in the
rendered files changes. tests/support/health_node.py runs the same nvidia-smi in the
health program's unit tests.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

KIT_DIR = "/var/lib/gpu-cluster-lane"
HARDWARE_DIR = f"{KIT_DIR}/hardware"
INFINIBAND_DIR = f"{KIT_DIR}/infiniband"
KERNEL_LOG = f"{KIT_DIR}/kern.log"
NVIDIA_SMI_PATH = "/usr/local/bin/nvidia-smi"
XID_PCI = "0000:53:00"

# What the health program runs, answering from one file per value (FAKE_DIR: a unit
# test's sandbox; a lane node's own HARDWARE_DIR otherwise, since slurmd clears the env).
NVIDIA_SMI = r"""#!/bin/bash
# gpu-cluster lane stand-in for nvidia-smi (localcluster/hardware.py): no GPU here.
d=${FAKE_DIR:-/var/lib/gpu-cluster-lane/hardware}; n=$(cat "$d/gpus")
case "$1" in
  -L) for ((i=0;i<n;i++)); do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; done ;;
  --query-gpu=*) read -r g w < "$d/pcie"
     for ((i=0;i<n;i++)); do echo "00000000:5$i:00.0, $g, $w"; done ;;
  -q) for ((i=0;i<n;i++)); do
       printf 'GPU 00000000:5%d:00.0\n    ECC Mode\n        Current                           : Enabled\n' "$i"
       printf '    ECC Errors\n        Volatile\n            SRAM Uncorrectable            : 0\n'
       printf '            DRAM Uncorrectable            : %s\n' "$(cat "$d/dram_uncorr")"
       printf '        Aggregate\n            DRAM Uncorrectable            : 3\n'
       printf '    Remapped Rows\n        Pending                           : %s\n' "$(cat "$d/remap_pending")"
       printf '        Remapping Failure Occurred        : No\n'
     done ;;
  *) echo "nvidia-smi stand-in: $* is not stood in" >&2; exit 2 ;;
esac
"""

HEALTHY = {"gpus": "8", "pcie": "5 16", "remap_pending": "No", "dram_uncorr": "0"}


def efa_device(i: int) -> str:
    return f"rdmap{i}s0"


@dataclass(frozen=True)
class Kit:
    """A node's stand-in hardware: `gpus` GPUs and `efa` EFA devices, all healthy."""

    gpus: int = 8
    efa: int = 4

    def files(self) -> dict[str, tuple[bytes, int, str]]:
        """Files for LocalCluster.launch(extra=...): path -> (content, mode, owner)."""
        out: dict[str, tuple[bytes, int, str]] = {NVIDIA_SMI_PATH: (NVIDIA_SMI.encode(), 0o755, "root:root")}
        for name, value in {**HEALTHY, "gpus": str(self.gpus)}.items():
            out[f"{HARDWARE_DIR}/{name}"] = (f"{value}\n".encode(), 0o644, "root:root")
        for i in range(self.efa):
            out[f"{INFINIBAND_DIR}/{efa_device(i)}/ports/1/state"] = (b"4: ACTIVE\n", 0o444, "root:root")
        out[KERNEL_LOG] = (b"[    0.000000] Linux version (gpu-cluster lane kernel log copy)\n", 0o644, "root:root")
        return out

    def swaps(self) -> dict[str, str]:
        """overrides.env lines: what the checks expect and where they read it."""
        return {
            "HEALTH_GPUS": str(self.gpus),
            "HEALTH_EFA_COUNT": str(self.efa),
            "HEALTH_SYSFS_INFINIBAND": INFINIBAND_DIR,
            "HEALTH_XID_SOURCE": KERNEL_LOG,
        }


def xid_line(xid: int, stamp: float = 4242.0) -> str:
    """A kernel-log line as the NVIDIA driver writes an XID event [NV-XID]."""
    return f"[{stamp:12.6f}] NVRM: Xid (PCI:{XID_PCI}): {xid}, pid=4242, name=python3, Ch 00000008\n"


@dataclass(frozen=True)
class Fault:
    """One fault: a shell command that injects it inside the node, one that clears it,
    and the check (with its drain evidence) that must find it."""

    name: str
    check: str
    action: str  # the check's action class (replace / reset)
    evidence: str  # a regular expression the drain reason must match after the prefix
    inject: str
    clear: str


def faults(kit: Kit) -> dict[str, Fault]:
    """The lane's faults, one per kind of tool the checks read."""
    gone = efa_device(kit.efa - 1)
    return {
        "gpu-count": Fault(
            "gpu-count",
            "gpu-count",
            "replace",
            rf"gpu count {kit.gpus - 1} of {kit.gpus} \(nvidia-smi -L\)",
            f"echo {kit.gpus - 1} > {HARDWARE_DIR}/gpus",
            f"echo {kit.gpus} > {HARDWARE_DIR}/gpus",
        ),
        "efa": Fault(
            "efa",
            "efa",
            "replace",
            rf"efa devices {kit.efa - 1} of {kit.efa} \({INFINIBAND_DIR}\)",
            f"mv {INFINIBAND_DIR}/{gone} {KIT_DIR}/removed-{gone}",
            f"mv {KIT_DIR}/removed-{gone} {INFINIBAND_DIR}/{gone}",
        ),
        "fsx": Fault(
            "fsx",
            "fsx",
            "reset",
            r"/fsx not writable: Read-only file system \(\S+\)",
            "mount -o remount,bind,ro /fsx",
            "mount -o remount,bind,rw /fsx",
        ),
        "xid": Fault(
            "xid",
            "xid",
            "replace",
            rf"xid 79 \(replace: GPU has fallen off the bus\) on {XID_PCI} \({KERNEL_LOG}\)",
            f"printf %s {shlex.quote(xid_line(79))} >> {KERNEL_LOG}",
            # what the operator runs after a repair (docs/health.md): the kept fault is forgotten
            "/opt/gpu-cluster/bin/gpu-cluster-health --clear-xid >/dev/null",
        ),
    }
