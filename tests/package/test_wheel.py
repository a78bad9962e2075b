"""The package as an adopter installs it: the wheel built from this tree, installed into a
fresh virtualenv outside the repository, each console entry point's --help and one real
command run from a directory holding only stack files, and the policy pack served from
a pack directory that holds only its two files.

The fresh virtualenv gets the wheel alone (`--no-deps`); its dependencies are the
hash-locked ones of this checkout's virtualenv, made visible through a path file
(without that virtualenv's own path files, so the checkout itself is not importable).
Building and installing takes about 15 s: `make test` runs it, `make check` does not
(marker `package`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from model.version import VERSION, version_line
from policy import rules
from tests.support.debian_install import repo_copy

pytestmark = pytest.mark.package

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ("gpu-cluster-ops", "gpu-cluster-plan", "gpu-cluster-verdict")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    # Built from a copy of the tracked files (setuptools writes build/ beside the sources),
    # with the lock's setuptools: nothing unhashed is fetched.
    src = repo_copy(tmp / "src")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = (tmp / "dist").glob("gpu_cluster-*.whl")
    assert wheel.name == f"gpu_cluster-{VERSION}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "policy/PulumiPolicy.yaml" in names and "policy/rules.py" in names
    assert "nodeside/bin/gpu-cluster-boot" in names and "userdata/templates/slurm/slurm.conf.j2" in names
    assert not any(n.startswith("tests/") for n in names)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "locked-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    return venv


def _run(venv: Path, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
    # No AWS anywhere: a command that tried to call AWS would fail on credentials.
    env.update(
        AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="", AWS_CONFIG_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true"
    )
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def project(tmp_path) -> Path:
    """A directory with only what an adopter keeps: the project file and a stack file."""
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_the_checkout_is_not_importable(installed, tmp_path):
    r = _run(installed, ["python", "-c", "import model, policy; print(model.__file__, policy.__file__)"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert str(ROOT) not in r.stdout and "site-packages" in r.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(installed, tmp_path, script):
    r = _run(installed, [script, "--help"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: ")


def test_ops_reads_stack_files_from_the_working_directory(installed, project):
    r = _run(installed, ["gpu-cluster-ops", "status", "--stack", "nope"], project)
    assert r.returncode == 3, r.stderr  # clitools/exits.py: a file that cannot be read
    assert "Pulumi.nope.yaml: no such stack file; stacks here: dev" in r.stderr + r.stdout
    # A real preflight: the shipped example ids are refused before any AWS call.
    r = _run(installed, ["gpu-cluster-ops", "preflight", "--stack", "dev"], project)
    assert r.returncode == 2, r.stderr
    assert r.stdout.splitlines()[-1] == "preflight dev: 4 config problem(s); fix the stack file first"


def test_plan_renders_the_stack_of_the_working_directory(installed, project):
    r = _run(installed, ["gpu-cluster-plan", "--stack", "dev", "--out", "out"], project)
    assert r.returncode == 0, r.stderr
    plan = json.loads((project / "out" / "plan.json").read_text())
    assert plan["stack"] == "dev" and len(plan["resources"]) > 30
    # The node files come from the installed package's data (templates, verbatim scripts).
    assert (
        project / "out" / "userdata" / "node" / "files" / "opt" / "gpu-cluster" / "bin" / "gpu-cluster-boot"
    ).is_file()


def test_verdict_judges_a_log(installed, tmp_path):
    log = tmp_path / "all_reduce.log"
    shutil.copy(ROOT / "tests" / "data" / "verdict" / "efa_p5_allreduce_16g.log", log)
    r = _run(installed, ["gpu-cluster-verdict", "--json", str(log)], tmp_path)
    assert r.returncode in (0, 1), r.stderr
    result = json.loads(r.stdout.splitlines()[0])
    assert result["file"] == str(log) and result["verdict"] in ("GO", "NO-GO")


def test_version_home_is_in_the_wheel(installed, tmp_path):
    r = _run(installed, ["python", "-c", "from model.version import version_line; print(version_line('x'))"], tmp_path)
    assert r.stdout.strip() == version_line("x")
    r = _run(installed, ["python", "-c", "import gpu_cluster; print(gpu_cluster.__version__)"], tmp_path)
    assert r.stdout.strip() == VERSION


def test_policy_pack_published_alone_serves_from_the_installed_package(installed, tmp_path):
    import grpc
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import analyzer_pb2_grpc

    pack = tmp_path / "pack"
    pack.mkdir()
    for name in ("__main__.py", "PulumiPolicy.yaml", "requirements.txt"):
        shutil.copy(ROOT / "policy" / name, pack / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.Popen(
        [str(installed / "bin" / "python"), "-u", "__main__.py"],
        cwd=pack,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = proc.stdout.readline().strip()
        assert port.isdigit(), proc.stderr.read() if proc.poll() is not None else port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            info = analyzer_pb2_grpc.AnalyzerStub(channel).GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
        assert info.name == "gpu-cluster"
        assert [p.name for p in info.policies] == [r.name for r in rules.RULES]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
