"""gpu-cluster-fetch checks its tools and names the missing one (issue 9).

The payload fetcher runs before anything else on a node (there is no entry point, and
no /fsx, without the payload). It used to call `aws` unchecked: on an image without the
AWS CLI it tried five times, slept 40 s, and said "cannot fetch ... (instance role, S3
access)", pointing at IAM. Run here with a PATH holding only the tools each case has.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

FETCH = Path(__file__).resolve().parents[2] / "nodeside" / "bin" / "gpu-cluster-fetch"
BASE_TOOLS = ("bash", "mkdir", "mktemp", "cp", "sha256sum", "cut", "tar", "gzip", "rm", "sleep", "cat")


def _payload(tmp_path: Path) -> tuple[Path, str]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        data = b"CLUSTER_NAME=demo\n"
        info = tarfile.TarInfo("etc/gpu-cluster/from-payload")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "payload.tar.gz"
    path.write_bytes(raw.getvalue())
    return path, hashlib.sha256(raw.getvalue()).hexdigest()


def _bin(tmp_path: Path, tools: tuple[str, ...], extra: dict[str, str] | None = None) -> Path:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for t in tools:
        real = shutil.which(t, path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        assert real, t
        (d / t).symlink_to(real)
    for name, body in (extra or {}).items():
        (d / name).write_text(body)
        (d / name).chmod(0o755)
    return d


def _fetch(bindir: Path, uri: str, sha: str, dest: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    dest.mkdir(exist_ok=True)
    t0 = time.monotonic()
    r = subprocess.run(
        [str(FETCH), uri, sha, str(dest)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": str(bindir), "HOME": str(dest), **env},
    )
    return r, time.monotonic() - t0


def _status(dest: Path) -> dict:
    return json.loads((dest / "var/lib/gpu-cluster/status").read_text())


@pytest.fixture(autouse=True)
def _no_aws_outside_path():
    for f in ("/usr/local/bin/aws", "/snap/bin/aws"):
        if os.path.exists(f):
            pytest.skip(f"{f} exists on this host: the fetcher would find it")


def test_s3_without_the_aws_cli_fails_at_once_naming_it(tmp_path):
    _, sha = _payload(tmp_path)
    bindir = _bin(tmp_path, BASE_TOOLS + ("curl",))
    r, took = _fetch(bindir, "s3://bucket/gpu-cluster/payload.tar.gz", sha, tmp_path / "root")
    assert r.returncode == 1
    assert took < 5, f"took {took:.0f}s: retried a fetch that cannot work"
    assert "the AWS CLI (aws) is not installed" in r.stderr
    assert "install the AWS CLI in the image (the Deep Learning AMI has it)" in r.stderr
    st = _status(tmp_path / "root")
    assert (st["step"], st["state"]) == ("payload", "failed")
    assert st["reason"].startswith(
        "cannot fetch s3://bucket/gpu-cluster/payload.tar.gz: the AWS CLI (aws) is not installed"
    )


def test_s3_without_curl_names_curl(tmp_path):
    _, sha = _payload(tmp_path)
    bindir = _bin(tmp_path, BASE_TOOLS, {"aws": "#!/bin/bash\nexit 0\n"})
    r, _ = _fetch(bindir, "s3://bucket/p.tar.gz", sha, tmp_path / "root")
    assert r.returncode == 1 and "curl is not installed" in r.stderr


def test_missing_tar_is_named(tmp_path):
    payload, sha = _payload(tmp_path)
    bindir = _bin(tmp_path, tuple(t for t in BASE_TOOLS if t != "tar"))
    r, _ = _fetch(bindir, f"file://{payload}", sha, tmp_path / "root")
    assert r.returncode == 1
    assert "cannot unpack the node payload: tar not found on PATH" in r.stderr


def test_s3_with_the_aws_cli_fetches_checks_and_unpacks(tmp_path):
    payload, sha = _payload(tmp_path)
    # Stands in for `aws s3 cp --only-show-errors --region R s3://... DEST`.
    fake_aws = f'#!/bin/bash\necho "$*" >>"{tmp_path}/aws.calls"\nexec cp "{payload}" "${{@: -1}}"\n'
    bindir = _bin(tmp_path, BASE_TOOLS + ("curl",), {"aws": fake_aws})
    r, _ = _fetch(bindir, "s3://bucket/p.tar.gz", sha, tmp_path / "root", AWS_REGION="us-east-2")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "root/etc/gpu-cluster/from-payload").read_text() == "CLUSTER_NAME=demo\n"
    calls = (tmp_path / "aws.calls").read_text().split()
    assert calls[:5] == ["s3", "cp", "--only-show-errors", "--region", "us-east-2"]
    # A payload that is not the one the user data names is refused.
    r, _ = _fetch(bindir, "s3://bucket/p.tar.gz", "0" * 64, tmp_path / "other", AWS_REGION="us-east-2")
    assert r.returncode == 1 and "does not have sha256" in r.stderr
    assert not (tmp_path / "other/etc").exists()


def test_file_uri_needs_neither_aws_nor_curl(tmp_path):
    payload, sha = _payload(tmp_path)
    bindir = _bin(tmp_path, BASE_TOOLS)
    r, _ = _fetch(bindir, f"file://{payload}", sha, tmp_path / "root")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "root/etc/gpu-cluster/from-payload").exists()


def test_unsupported_uri_fails_at_once(tmp_path):
    bindir = _bin(tmp_path, BASE_TOOLS)
    r, took = _fetch(bindir, "https://example.invalid/p.tar.gz", "0" * 64, tmp_path / "root")
    assert r.returncode == 1 and took < 5
    assert "unsupported payload URI 'https://example.invalid/p.tar.gz'" in r.stderr
