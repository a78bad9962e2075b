"""The README's install on stock Debian: Debian's own /usr/bin/python3, no other Python
on PATH, a fresh copy of the repository; everything Python lands in the project
virtualenv and the system interpreter (externally managed, PEP 668) is left alone.

Debian 12 runs on this host: `.ci/run` itself runs `make test` that way (Debian's PATH,
PYTHON=/usr/bin/python3), so in CI the suite only checks that its own virtualenv came
from Debian's interpreter; elsewhere a fresh copy runs `make deps` (what `make test` and
`make local-cluster` run first) and `make render`, a real command in that virtualenv. Debian 13 runs chrooted
into an overlay of the trixie lane's debootstrap base (localcluster/images.py; cached,
and built anyway by the trixie lane), which has Debian's python3 but no python3-venv:
`scripts/install-deps.sh --python` must install python3-venv, create the virtualenv
with Python 3.13 and fill it from the same hash-locked file.

Cost in CI: the Debian 13 install, 134-193 s measured on the loaded 2-core machine
(pip's cache warm; printed as `install-debian: ...`); the Debian 12 check is instant
there. Outside CI the Debian 12 fresh-copy install adds 80-196 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.debian_install import (
    CA_IN_ROOT,
    DEBIAN_PATH,
    clean_env,
    repo_copy,
    run_in_overlay,
    site_listing,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (apt, chroot, mounts)")
IMPORTS = "import pulumi, pulumi_aws, pulumi_policy, pydantic, jinja2, yaml, boto3, pytest, mypy, ruff"


def _debian_python() -> None:
    if not Path("/usr/bin/python3").exists() or not list(Path("/usr/lib").glob("python3.*/EXTERNALLY-MANAGED")):
        pytest.skip("this host's /usr/bin/python3 is not Debian's externally managed interpreter")


def _venv_home() -> str:
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    lines = cfg.read_text().splitlines() if cfg.is_file() else []
    return next((line.split("=", 1)[1].strip() for line in lines if line.startswith("home")), "")


def test_debian_12_this_run_is_the_install(tmp_path):
    """Under .ci/run the suite runs in the virtualenv `make deps` made from Debian's python."""
    if os.environ.get("GPU_CLUSTER_DEBIAN_PYTHON") != "/usr/bin/python3":
        pytest.skip("not run through .ci/run (Debian's PATH and python3): the fresh-copy test below covers it")
    _debian_python()
    assert sys.prefix != sys.base_prefix, "the suite does not run in a virtualenv"
    assert _venv_home() == "/usr/bin", f"{sys.prefix} was not made from Debian's /usr/bin/python3"
    assert os.path.realpath(sys._base_executable) == os.path.realpath("/usr/bin/python3")
    r = subprocess.run(["/usr/bin/python3", "-c", "import pulumi"], capture_output=True, env=clean_env())
    assert r.returncode != 0, "pulumi was installed into Debian's own interpreter"


@needs_root
def test_debian_12_make_deps_uses_a_project_venv_and_leaves_system_python_alone(tmp_path):
    if os.environ.get("GPU_CLUSTER_DEBIAN_PYTHON") == "/usr/bin/python3" and _venv_home() == "/usr/bin":
        pytest.skip("this run's own install is the Debian 12 install (test_debian_12_this_run_is_the_install)")
    _debian_python()
    env = clean_env()
    which = subprocess.run(["bash", "-c", "type -ap python3 python"], env=env, capture_output=True, text=True)
    # /bin is /usr/bin on a merged-/usr system: the same file twice is one interpreter.
    found = {os.path.realpath(p) for p in which.stdout.split()}
    assert found == {os.path.realpath("/usr/bin/python3")}, f"another Python on {DEBIAN_PATH}: {which.stdout}"
    clone = repo_copy(tmp_path / "clone")
    before = site_listing()
    start = time.monotonic()
    r = subprocess.run(["make", "deps"], cwd=clone, env=env, capture_output=True, text=True, timeout=1200)
    took = time.monotonic() - start
    assert r.returncode == 0, r.stdout + r.stderr
    assert "externally-managed-environment" not in r.stdout + r.stderr
    cfg = (clone / "venv" / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in cfg, cfg
    subprocess.run([str(clone / "venv/bin/python"), "-c", IMPORTS], check=True, env=env)
    assert site_listing() == before
    # A real command in that virtualenv, as the Makefile runs it.
    r = subprocess.run(
        ["make", "render", "STACK=dev", f"OUT={tmp_path / 'render'}"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "render" / "plan.json").is_file()
    # Idempotent: a second `make deps` finds the lock filled and installs nothing.
    again = time.monotonic()
    r = subprocess.run(["make", "deps"], cwd=clone, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "installing" not in r.stdout, r.stdout + r.stderr
    print(f"install-debian: Debian 12 make deps {took:.0f} s, again {time.monotonic() - again:.1f} s")


@pytest.fixture(scope="module")
def trixie_base() -> Path:
    from localcluster import images

    try:
        return images.build_base(images.LANES["trixie"])
    except images.ImageBuildError as err:
        pytest.fail(f"trixie base: {err}")


CHECKS_13 = f"""
set -euo pipefail
cd /src
test ! -e /usr/lib/python3/dist-packages/pulumi
dpkg-query -W -f='${{Status}}' python3-venv 2>/dev/null | grep -q 'install ok installed' && echo 'venv preinstalled'
scripts/install-deps.sh --python
echo "== python $(venv/bin/python -c 'import platform; print(platform.python_version())')"
grep -q '^home = /usr/bin$' venv/pyvenv.cfg
venv/bin/python -c '{IMPORTS}'
ls /usr/lib/python3.*/EXTERNALLY-MANAGED
if /usr/bin/python3 -c 'import pulumi' 2>/dev/null; then echo 'system python has pulumi'; exit 1; fi
venv/bin/python -m offline.plan --stack dev --out /tmp/plan >/dev/null
test -s /tmp/plan/plan.json
echo "== plan ok"
"""


@needs_root
@pytest.mark.lane_root  # the trixie lane's debootstrap base (make test builds it in the background)
def test_debian_13_install_in_a_trixie_root_installs_python3_venv_and_fills_the_venv(tmp_path, trixie_base):
    from localcluster import images

    repo_copy(tmp_path / "upper" / "src")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8", "PIP_CERT": CA_IN_ROOT}
    env["PIP_NO_COMPILE"] = "1"  # as clean_env: no .pyc writing, the same install
    start = time.monotonic()
    r = run_in_overlay(trixie_base, tmp_path, images.CACHE_ROOT / "debs" / "trixie", env, CHECKS_13, timeout=1500)
    took = time.monotonic() - start
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "venv preinstalled" not in out
    assert "install-deps: installing Debian packages: python3-venv" in out
    assert "== python 3.13." in out
    assert "== plan ok" in out
    print(f"install-debian: Debian 13 install in a trixie root {took:.0f} s")
