"""The registry secrets of the private-images stack, a stand-in aws and a sandbox that runs the login step."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.support.mocks import REGION
from userdata.registries import SOURCE_DIR as REG_TEMPLATES

BOOT = Path(__file__).resolve().parents[2] / "nodeside"
ACCOUNT = "123456789012"  # offline.mocks.ACCOUNT: what the mocked getCallerIdentity answers
OWN = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
OTHER = "210987654321.dkr.ecr.eu-west-1.amazonaws.com"
ECR_PASSWORD = "eyJwYXlsb2FkIjoiRUNSLVRPS0VOLVNFQ1JFVCJ9"
NGC_KEY_VALUE = "nvapi-NGC-SECRET-0123456789"
PRIVATE_PASSWORD = "pr1vate-PASSWORD-secret"
FAKE_AWS = r'''#!/usr/bin/env python3
"""Stand-in aws CLI: answers from $FAKE_AWS_ANSWERS, records argv to $FAKE_AWS_CALLS."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_AWS_CALLS"], "a") as f:
    f.write(" ".join(args) + "\n")
answers = json.load(open(os.environ["FAKE_AWS_ANSWERS"]))
def opt(name):
    return args[args.index(name) + 1]
key = None
if args[:2] == ["ecr", "get-authorization-token"]:
    key = "ecr " + opt("--region")
elif args[:2] == ["ssm", "get-parameter"]:
    assert "--with-decryption" in args
    key = "ssm " + opt("--region") + " " + opt("--name")
elif args[:2] == ["secretsmanager", "get-secret-value"]:
    key = "secretsmanager " + opt("--region") + " " + opt("--secret-id")
if key not in answers:
    sys.stderr.write("An error occurred (AccessDeniedException) when calling the operation: not authorized\n")
    sys.exit(254)
print(answers[key])
'''


class Node:
    """A node's registry files under tmp: cluster.env, registries.conf, the program, fake aws."""

    def __init__(self, root: Path, conf_lines: list[str], answers: dict[str, str]):
        self.root = root
        self.etc, self.bin, self.enroot = root / "etc", root / "bin", root / "enroot"
        for d in (self.etc, self.bin):
            d.mkdir(parents=True)
        self.creds = self.enroot / "config" / ".credentials"
        self.calls = root / "aws.calls"
        self.calls.touch()
        (self.etc / "registries.conf").write_text("# header\n" + "".join(f"{ln}\n" for ln in conf_lines))
        (self.etc / "cluster.env").write_text(
            f"REGISTRIES_CONF={self.etc}/registries.conf\nENROOT_CONFIG_DIR={self.enroot}/config\n"
            f"ENROOT_CREDENTIALS={self.creds}\nENROOT_CONF_DROPIN={self.enroot}/enroot.conf.d/90-gpu-cluster-registries.conf\n"
        )
        (self.bin / "aws").write_text(FAKE_AWS)
        (self.bin / "aws").chmod(0o755)
        (root / "answers.json").write_text(json.dumps(answers))

    def env(self, **extra) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("GPU_CLUSTER")},
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "GPU_CLUSTER_ETC": str(self.etc),
            "FAKE_AWS_ANSWERS": str(self.root / "answers.json"),
            "FAKE_AWS_CALLS": str(self.calls),
            **extra,
        }

    def login(self) -> subprocess.CompletedProcess:
        prog = REG_TEMPLATES / "bin" / "gpu-cluster-registry-login"
        return subprocess.run([str(prog)], env=self.env(), capture_output=True, text=True, timeout=60)


def _token(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


CONF = [
    f"ecr {OWN} {REGION}",
    f"ecr 111122223333.dkr.ecr.{REGION}.amazonaws.com {REGION}",
    f"ecr {OTHER} eu-west-1",
    f"ssm nvcr.io {REGION} /gpu-cluster/ngc",
    f"ssm authn.nvidia.com {REGION} /gpu-cluster/ngc",
    f"secretsmanager registry.example.com:5000 {REGION} team/registry",
]


ANSWERS = {
    f"ecr {REGION}": _token("AWS", ECR_PASSWORD),
    "ecr eu-west-1": _token("AWS", ECR_PASSWORD + "eu"),
    f"ssm {REGION} /gpu-cluster/ngc": json.dumps({"login": "$oauthtoken", "password": NGC_KEY_VALUE}),
    f"secretsmanager {REGION} team/registry": json.dumps({"login": "robot", "password": PRIVATE_PASSWORD}),
}


SECRETS = (ECR_PASSWORD, NGC_KEY_VALUE, PRIVATE_PASSWORD)


def _step_box(tmp_path: Path, manager: str, answers=None) -> tuple[Node, subprocess.CompletedProcess, Path]:
    node = Node(tmp_path, CONF, ANSWERS if answers is None else answers)
    home = tmp_path / "opt"
    for d in ("bin", "lib", "steps"):
        (home / d).mkdir(parents=True)
    shutil.copy(BOOT / "bin" / "gpu-cluster-boot", home / "bin" / "gpu-cluster-boot")
    shutil.copy(BOOT / "lib" / "common.sh", home / "lib" / "common.sh")
    shutil.copy(REG_TEMPLATES / "bin" / "gpu-cluster-registry-login", home / "bin" / "gpu-cluster-registry-login")
    shutil.copy(REG_TEMPLATES / "steps" / "65-registries.sh", home / "steps" / "65-registries.sh")
    calls = tmp_path / "systemctl.calls"
    # a fresh node: nothing enabled yet (is-enabled fails); enable says whether SysV hooks run
    fake = (
        f'#!/bin/bash\necho "${{SYSTEMCTL_SKIP_SYSV:+SKIP_SYSV }}$*" >>"{calls}"\n'
        "[[ $1 == is-enabled ]] && exit 1\nexit 0\n"
    )
    (node.bin / "systemctl").write_text(fake)
    (node.bin / "systemctl").chmod(0o755)
    env = node.env(
        GPU_CLUSTER_HOME=str(home),
        GPU_CLUSTER_STATE=str(tmp_path / "state"),
        GPU_CLUSTER_RUN=str(tmp_path / "run"),
        GPU_CLUSTER_LOG_DIR=str(tmp_path / "log"),
        GPU_CLUSTER_SERVICE_MANAGER=manager,
    )
    with (node.etc / "cluster.env").open("a") as f:
        f.write(f"CLUSTER_NAME=demo\nFSX_MOUNTPOINT={tmp_path}/fsx\nFSX_ROOT={tmp_path}/fsx/.gpu-cluster/demo\n")
    r = subprocess.run([str(home / "bin" / "gpu-cluster-boot")], env=env, capture_output=True, text=True, timeout=60)
    return node, r, calls
