"""lib/check-pmix.sh (step 50) and the gate's pmix step: a real two-task `srun --mpi=pmix` that can fail.

The fake srun prints what Slurm 22.05's srun printed on this machine, which has Slurm's
mpi/pmix plugin but no PMIx library (`srun --mpi=list` still lists pmix there):
recorded 2026-12-01 from `srun --mpi=pmix -n2 true` (see also tests/daemons/test_pmix_root.py,
which runs the real srun).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

CHECK = Path(__file__).resolve().parents[2] / "nodeside" / "lib" / "check-pmix.sh"
NO_LIBPMIX = """srun: error:  mpi/pmix_v4: init: (null) [0]: mpi_pmix.c:195: pmi/pmix: can not load PMIx library
srun: error: Couldn't load specified plugin name for mpi/pmix: Plugin init() callback failed
srun: error: MPI: Cannot create context for mpi/pmix
srun: error: MPI: Unable to load any plugin
srun: error: Invalid MPI type 'pmix', --mpi=list for acceptable types
"""


def fake_srun(tmp_path: Path, body: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f'#!/usr/bin/env bash\necho "$*" >>"{tmp_path}/srun.log"\n{body}\n')
    (bin_dir / "srun").chmod(0o755)
    (tmp_path / "error.txt").write_text(NO_LIBPMIX)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}


def run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHECK), *args], env=env, capture_output=True, text=True, timeout=30)


def test_missing_pmix_library_fails_with_slurms_error(tmp_path):
    env = fake_srun(
        tmp_path,
        f"""[[ $1 == --mpi=list ]] && {{ printf 'MPI plugin types are...\\n\\tpmix\\n'; exit 0; }}
cat "{tmp_path}/error.txt" >&2; exit 1""",
    )
    r = run(tmp_path, env, "-N1", "-w", "n1", "--immediate=60")
    assert r.returncode == 1
    assert r.stdout == (
        "srun --mpi=pmix -n2 -N1 -w n1 --immediate=60 true exited 1: " + ";".join(NO_LIBPMIX.splitlines()) + "\n"
    )
    # what the old check asked: the plugin is listed although no PMIx step can run
    listed = subprocess.run(["srun", "--mpi=list"], env=env, capture_output=True, text=True)
    assert "pmix" in listed.stdout


def test_a_two_task_pmix_step_that_runs_passes(tmp_path):
    env = fake_srun(tmp_path, "exit 0")
    r = run(tmp_path, env, "-N1", "-w", "n1")
    assert r.returncode == 0 and r.stdout == ""
    assert (tmp_path / "srun.log").read_text() == "--mpi=pmix -n2 -N1 -w n1 true\n"
