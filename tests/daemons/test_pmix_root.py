"""The PMIx check against the real srun on a root without the PMIx library (root, Debian's Slurm).

Slurm's mpi/pmix plugin opens `<libdir>/pmix2/lib/libpmix.so` when srun loads it, before
srun contacts any controller. A private mount namespace hides that directory (tmpfs over
it) when the host has it, so this is a Slurm root with the plugin and without the library,
whatever the host: `srun --mpi=list` still lists pmix there, and lib/check-pmix.sh, which
step 50 runs, fails with Slurm's own error.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parents[2] / "nodeside" / "lib" / "check-pmix.sh"
PLUGINS = sorted(Path("/usr/lib").glob("*/slurm-wlm/mpi_pmix*.so"))

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(shutil.which("srun") is None or not PLUGINS, reason="needs Debian's Slurm with mpi/pmix"),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
]


def in_root_without_libpmix(tmp_path: Path, command: str) -> subprocess.CompletedProcess:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=pmixcheck\nSlurmctldHost=localhost\nNodeName=localhost CPUs=2\n"
        "PartitionName=p Nodes=ALL Default=YES\n"
    )
    pmix_dir = PLUGINS[0].parent.parent / "pmix2"
    hide = f"mount -t tmpfs none {pmix_dir} && " if pmix_dir.is_dir() else ""
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", f"{hide}{command}"],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": str(conf), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_mpi_list_still_lists_pmix_without_the_library(tmp_path):
    r = in_root_without_libpmix(tmp_path, "srun --mpi=list")
    assert r.returncode == 0 and "pmix" in r.stdout.split(), r.stdout + r.stderr


def test_check_pmix_fails_with_slurms_error_without_the_library(tmp_path):
    r = in_root_without_libpmix(tmp_path, f"{CHECK} -N1 -w localhost --immediate=5")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("srun --mpi=pmix -n2 -N1 -w localhost --immediate=5 true exited 1: srun: error: ")
    assert "can not load PMIx library" in r.stdout
