"""A sandbox for nodeside/health.py: every tool it calls, faked on PATH, and a node's files.

The fakes read what to report from files under `fakes/` (one value per file), so a test
injects a fault by writing one file, through the same tools the checks read:
  gpus            nvidia-smi -L lines (default 8)
  pcie            `gen width` of every GPU in the pcie.link query (default `5 16`)
  remap_pending   Yes/No in nvidia-smi -q's Remapped Rows (default No)
  dram_uncorr     volatile DRAM uncorrectable count (default 0)
  chrony          chronyc tracking output (default synchronised, 12 us)
  dcgm            dcgmi diag -r 1 output (default every test Pass); dcgm_rc its exit
  munge_rc        unmunge's exit status (default 0)
  slurm           `state|reason` sinfo prints (default `idle|none`); scontrol updates it
and every scontrol call is appended to `fakes/scontrol.log`. The EFA tree is a fake
/sys/class/infiniband (HEALTH_SYSFS_INFINIBAND), the XID source a file
(HEALTH_XID_SOURCE), slurmd a copy of `sleep` named slurmd with its pid file, the boot's
local status `state/status` (ok: the boot finished).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from localcluster import hardware

REPO = Path(__file__).resolve().parents[2]
HEALTH = REPO / "nodeside" / "health.py"

_FAKES = {
    "nvidia-smi": hardware.NVIDIA_SMI,  # the lanes' stand-in, one home
    "chronyc": '#!/bin/bash\ncat "$FAKE_DIR/chrony"\n',
    "dcgmi": '#!/bin/bash\ncat "$FAKE_DIR/dcgm"; exit "$(cat "$FAKE_DIR/dcgm_rc")"\n',
    "munge": "#!/bin/bash\necho MUNGE:fakecredential\n",
    "unmunge": '#!/bin/bash\ncat >/dev/null; exit "$(cat "$FAKE_DIR/munge_rc")"\n',
    "sinfo": '#!/bin/bash\ncat "$FAKE_DIR/slurm"\n',
    "scontrol": r"""#!/bin/bash
printf '%s\n' "$*" >> "$FAKE_DIR/scontrol.log"
case "$*" in
  *state=drain*) a="$*"; echo "drained|${a##*reason=}" > "$FAKE_DIR/slurm" ;;
  *state=resume*) echo "idle|none" > "$FAKE_DIR/slurm" ;;
esac
""",
}

DEFAULTS = {
    "gpus": "8",
    "pcie": "5 16",
    "remap_pending": "No",
    "dram_uncorr": "0",
    "chrony": "Reference ID    : A9FEA97B (169.254.169.123)\nLeap status     : Normal\n"
    "System time     : 0.000012345 seconds fast of NTP time\n",
    "dcgm": "| Deployment | Pass |\n| Software | Pass |\n",
    "dcgm_rc": "0",
    "munge_rc": "0",
    "slurm": "idle|none",
}
NODE = "ip-10-0-1-5"


@dataclass
class HealthNode:
    root: Path
    env: dict[str, str] = field(default_factory=dict)
    slurmd: subprocess.Popen | None = None

    @property
    def fakes(self) -> Path:
        return self.root / "fakes"

    @property
    def records(self) -> Path:
        return self.root / "fsx" / "health"

    @property
    def xid_log(self) -> Path:
        return self.root / "kern.log"

    @property
    def ib(self) -> Path:
        return self.root / "sys-infiniband"

    def set(self, name: str, value: str) -> None:
        (self.fakes / name).write_text(value)

    def add_xid(self, xid: int, pci: str = "0000:53:00") -> None:
        with self.xid_log.open("a") as f:
            f.write(f"[ 123.4] NVRM: Xid (PCI:{pci}): {xid}, pid=1234, name=python, test fault\n")

    def scontrol_calls(self) -> list[str]:
        log = self.fakes / "scontrol.log"
        return log.read_text().splitlines() if log.exists() else []

    def run(self, *args: str, path: str | None = None) -> dict:
        env = {**os.environ, **self.env, "PATH": path if path is not None else f"{self.root / 'bin'}:/usr/bin:/bin"}
        proc = subprocess.run([sys.executable, str(HEALTH), *args], env=env, capture_output=True, text=True, timeout=60)
        record: dict = json.loads(proc.stdout)
        # The exit-code table (clitools/exits.py): 1 when a check failed, else 0.
        assert proc.returncode == (1 if record["state"] == "unhealthy" else 0), proc.stderr
        return record

    def stop(self) -> None:
        if self.slurmd is not None and self.slurmd.poll() is None:
            self.slurmd.kill()
            self.slurmd.wait()


def make_node(root: Path, efa: int = 4, **cluster_env: object) -> HealthNode:
    """A node with every tool present and healthy; `cluster_env` overrides cluster.env keys."""
    bin_dir, fakes, etc = root / "bin", root / "fakes", root / "etc"
    for d in (bin_dir, fakes, etc, root / "fsx" / "health", root / "state"):
        d.mkdir(parents=True, exist_ok=True)
    for name, text in _FAKES.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for name, value in DEFAULTS.items():
        (fakes / name).write_text(value)
    node = HealthNode(root, env={"GPU_CLUSTER_ETC": str(etc), "FAKE_DIR": str(fakes), "SLURMD_NODENAME": NODE})
    for i in range(efa):
        port = node.ib / f"rdmap{i}s0" / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n")
    node.xid_log.write_text("[    1.0] Linux version 6.8.0\n")
    fake_slurmd = root / "slurmd"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake_slurmd)
    node.slurmd = subprocess.Popen([str(fake_slurmd), "600"])
    (root / "slurmd.pid").write_text(f"{node.slurmd.pid}\n")
    values: dict[str, object] = {
        "CLUSTER_NAME": "demo",
        "FSX_MOUNTPOINT": "/",
        "FSX_ROOT": str(root / "fsx"),
        "HEALTH_GPUS": 8,
        "HEALTH_PCIE_GEN": 5,
        "HEALTH_PCIE_WIDTH": 16,
        "HEALTH_EFA_COUNT": efa,
        "HEALTH_NVME_MOUNT": "/",
        "HEALTH_NVME_MIN_FREE_PERCENT": 0,
        "HEALTH_CLOCK_MAX_OFFSET_MS": 100,
        "HEALTH_DCGM_LEVEL1": 1,
        "HEALTH_XID_SOURCE": str(node.xid_log),
        "HEALTH_RECORDS": str(node.records),
        "HEALTH_STATE": str(root / "state" / "health-state.json"),
        "HEALTH_SYSFS_INFINIBAND": str(node.ib),
        "HEALTH_SLURMD_PIDFILE": str(root / "slurmd.pid"),
        "HEALTH_BOOT_STATUS": str(root / "state" / "status"),
        **cluster_env,
    }
    (root / "state" / "status").write_text('{"state": "ok", "step": "95-handoff"}\n')
    (etc / "cluster.env").write_text("".join(f"{k}={shlex.quote(str(v))}\n" for k, v in values.items()))
    return node
