"""Inputs the local cluster's tests build: cloud-init user data, and fake image inputs."""

from __future__ import annotations

import gzip
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path

import yaml

from localcluster import mirror


# ---------------------------------------------------------------------------------
# user data, read back the way cloud-init reads it
# ---------------------------------------------------------------------------------
def _user_data(cloud_config: dict, script: bytes | None = None) -> bytes:
    msg = MIMEMultipart(boundary="==BOUNDARY==")
    msg.attach(MIMEText("#cloud-config\n" + yaml.safe_dump(cloud_config), "cloud-config"))
    if script is not None:
        msg.attach(MIMEText(script.decode(), "x-shellscript"))
    return gzip.compress(msg.as_bytes(), mtime=0)


def _fake_inputs(tmp_path: Path):
    base = tmp_path / "bases" / "bookworm-0000"
    for d in ("usr/sbin", "etc", "proc", "sys", "dev", "run", "tmp", "var/cache/apt/archives"):
        (base / d).mkdir(parents=True)
    m = mirror.Mirror(tmp_path / "mirror", "e" * 64, "p" * 64)
    m.root.mkdir()
    return base, m
