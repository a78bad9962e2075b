"""nodeside/run.py (gpu-cluster-run): the newest complete checkpoint and the restart count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nodeside import run

LAUNCHER = Path(run.__file__)


def _ckpt(root: Path, name: str, mtime: int, complete: bool = True) -> Path:
    d = root / name
    d.mkdir()
    if complete:
        (d / ".complete").write_text("")
    os.utime(d, (mtime, mtime))
    return d


def test_newest_complete_checkpoint(tmp_path):
    _ckpt(tmp_path, "step-100", 1000)
    newest = _ckpt(tmp_path, "step-200", 2000)
    _ckpt(tmp_path, "step-300", 3000, complete=False)  # still being written
    (tmp_path / "step-400.tmp").mkdir()
    assert run.newest_checkpoint(str(tmp_path)) == str(newest)
    assert run.newest_checkpoint(str(tmp_path / "missing")) is None
    assert run.newest_checkpoint(str(tmp_path), marker="") == str(tmp_path / "step-300")


def test_command_gets_checkpoint_restart_count_and_flag(tmp_path):
    newest = _ckpt(tmp_path, "step-200", 2000)
    seen = {}

    def execvpe(file, argv, env):
        seen.update(file=file, argv=argv, env=env)

    argv = ["--checkpoint-dir", str(tmp_path), "--resume-flag=--resume", "--", "python", "train.py"]
    run.main(argv, environ={"SLURM_RESTART_COUNT": "2", "PATH": "/usr/bin"}, execvpe=execvpe)
    assert seen["argv"] == ["python", "train.py", "--resume", str(newest)]
    assert seen["env"]["GPU_CLUSTER_CHECKPOINT"] == str(newest)
    assert seen["env"]["GPU_CLUSTER_RESTART_COUNT"] == "2"


def test_first_run_starts_fresh_and_max_restarts_stops_a_loop(tmp_path, capsys):
    seen = {}
    run.main(
        ["--resume-flag=--resume", "--", "python", "train.py"],
        environ={"GPU_CLUSTER_CHECKPOINT_DIR": str(tmp_path)},
        execvpe=lambda f, a, e: seen.update(argv=a, env=e),
    )
    assert seen["argv"] == ["python", "train.py"] and seen["env"]["GPU_CLUSTER_CHECKPOINT"] == ""
    assert seen["env"]["GPU_CLUSTER_RESTART_COUNT"] == "0"
    rc = run.main(
        ["--checkpoint-dir", str(tmp_path), "--max-restarts", "3", "--", "true"],
        environ={"SLURM_RESTART_COUNT": "4"},
    )
    assert rc == 1 and "restart 4 is over --max-restarts 3" in capsys.readouterr().err
    assert run.main(["--", "true"], environ={}) == 2
    assert "no checkpoint directory" in capsys.readouterr().err
    assert run.main(["--checkpoint-dir", str(tmp_path), "--", "/nonexistent/cmd"], environ={}) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "gpu-cluster-run: cannot start /nonexistent/cmd: No such file or directory"
    )


def test_exec_as_a_program(tmp_path):
    newest = _ckpt(tmp_path, "step-1", 1000)
    r = subprocess.run(
        [
            sys.executable,
            str(LAUNCHER),
            "--checkpoint-dir",
            str(tmp_path),
            "--",
            "sh",
            "-c",
            'echo "$GPU_CLUSTER_CHECKPOINT $$"',
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "SLURM_RESTART_COUNT": "1"},
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == str(newest)
    assert f"gpu-cluster-run: restart 1, resuming from {newest}" in r.stderr
