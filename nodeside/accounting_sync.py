#!/usr/bin/env python3
"""gpu-cluster-accounting-sync: register the cluster, accounts, QOS and users in slurmdbd.

Run on the controller by lib/accounting.sh at boot, after slurmdbd answers and before
slurmctld starts (a new controller, a relaunched cluster, a stack with new users all
boot through it). Reads what slurmdbd already holds (`sacctmgr -nP list ...`), adds
only what is missing and corrects what differs, with `sacctmgr -i` (no prompt) [SLURM-SACCTMGR]:
- the cluster (ClusterName);
- each user's account (parent root), and each default QOS;
- each user's association in their account, with that account as default;
- AdminLevel (Administrator or None) and the default QOS where they differ.
A second run changes nothing and prints nothing. Users and accounts that left the stack
file are kept: their jobs' history stays in sacct (remove them by hand if wanted).

Input: $USERS_CONF (`name uid group gid account admin default_qos` per line, `-` for no
QOS; may be absent: then only the cluster). Prints one line per change.
Exit: 0 done; 2 bad input; 3 sacctmgr cannot reach slurmdbd; 1 a change was refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

EXIT_OK, EXIT_REFUSED, EXIT_BAD, EXIT_UNREACHABLE = 0, 1, 2, 3


@dataclass(frozen=True)
class User:
    name: str
    account: str
    admin: bool
    qos: str | None


@dataclass(frozen=True)
class Listing:
    """What slurmdbd holds (lowercased as sacctmgr stores names)."""

    clusters: set[str]
    accounts: set[str]
    qos: set[str]
    admin: dict[str, str]  # user -> AdminLevel (None, Operator, Administrator)
    assocs: dict[tuple[str, str], str]  # (user, account) -> default QOS ('' for none)
    default_account: dict[str, str]  # user -> default account


def parse_users(text: str) -> list[User]:
    users = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split()
        if len(f) != 7 or f[5] not in ("0", "1"):
            raise ValueError(f"users.conf line {n}: expected 'name uid group gid account admin(0|1) qos', got {line!r}")
        users.append(User(f[0], f[4], f[5] == "1", None if f[6] == "-" else f[6]))
    return users


def _rows(text: str) -> list[list[str]]:
    return [line.split("|") for line in text.splitlines() if line]


def parse_listing(cluster: str, out: dict[str, str]) -> Listing:
    """`out`: the sacctmgr -nP outputs of clusters, accounts, qos, users and assocs."""
    users = _rows(out["users"])
    assocs = _rows(out["assocs"])
    return Listing(
        clusters={r[0] for r in _rows(out["clusters"])},
        accounts={r[0] for r in _rows(out["accounts"])},
        qos={r[0] for r in _rows(out["qos"])},
        admin={r[0]: r[2] for r in users if len(r) >= 3},
        default_account={r[0]: r[1] for r in users if len(r) >= 2},
        assocs={(r[2], r[1]): r[3] for r in assocs if len(r) >= 4 and r[0] == cluster and r[2]},
    )


def plan(cluster: str, users: list[User], have: Listing) -> list[list[str]]:
    """The sacctmgr commands (without `sacctmgr -i`) that make slurmdbd hold `users`."""
    cmds: list[list[str]] = []
    if cluster not in have.clusters:
        cmds.append(["add", "cluster", cluster])
    for account in sorted({u.account for u in users} - have.accounts):
        cmds.append(["add", "account", account, f"cluster={cluster}", "parent=root", f"description={account}"])
    for qos in sorted({u.qos for u in users if u.qos} - have.qos):
        cmds.append(["add", "qos", qos])
    for u in users:
        if (u.name, u.account) not in have.assocs:
            add = ["add", "user", u.name, f"account={u.account}", f"cluster={cluster}"]
            if u.name not in have.default_account:
                add.append(f"defaultaccount={u.account}")
            cmds.append(add)
        elif have.default_account.get(u.name) != u.account:
            cmds.append(["modify", "user", "where", f"name={u.name}", "set", f"defaultaccount={u.account}"])
        level = "Administrator" if u.admin else "None"
        if have.admin.get(u.name, "None") != level:
            cmds.append(["modify", "user", "where", f"name={u.name}", "set", f"adminlevel={level}"])
        if u.qos and have.assocs.get((u.name, u.account), "") != u.qos:
            where = ["where", f"name={u.name}", f"account={u.account}", f"cluster={cluster}"]
            cmds.append(["modify", "user", *where, "set", f"qos+={u.qos}", f"defaultqos={u.qos}"])
    return cmds


LISTS = {
    "clusters": ["list", "cluster", "format=cluster"],
    "accounts": ["list", "account", "format=account"],
    "qos": ["list", "qos", "format=name"],
    "users": ["list", "user", "format=user,defaultaccount,adminlevel"],
    "assocs": ["list", "assoc", "format=cluster,account,user,defaultqos"],
}


def sacctmgr(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["sacctmgr", *args], capture_output=True, text=True, timeout=timeout)


def run(cluster: str, users_text: str) -> tuple[int, list[str]]:
    try:
        users = parse_users(users_text)
    except ValueError as err:
        return EXIT_BAD, [str(err)]
    out = {}
    for key, args in LISTS.items():
        r = sacctmgr(["-nP", *args])
        if r.returncode != 0:
            return EXIT_UNREACHABLE, [f"sacctmgr {' '.join(args)}: {(r.stderr or r.stdout).strip()[:300]}"]
        out[key] = r.stdout
    lines, rc = [], EXIT_OK
    for cmd in plan(cluster, users, parse_listing(cluster, out)):
        r = sacctmgr(["-i", *cmd])
        said = " ".join((r.stdout + r.stderr).split())[:300]
        if r.returncode != 0:
            rc = EXIT_REFUSED
            lines.append(f"FAILED: sacctmgr -i {' '.join(cmd)}: {said}")
        else:
            lines.append(f"sacctmgr -i {' '.join(cmd)}")
    return rc, lines


def main() -> int:
    cluster = os.environ.get("CLUSTER_NAME", "")
    if not cluster:
        print("gpu-cluster-accounting-sync: CLUSTER_NAME is not set (cluster.env)", file=sys.stderr)
        return EXIT_BAD
    path = os.environ.get("USERS_CONF", "")
    try:
        text = Path(path).read_text() if path else ""
    except OSError as err:
        print(f"gpu-cluster-accounting-sync: cannot read {path}: {err.strerror}", file=sys.stderr)
        return EXIT_BAD
    rc, lines = run(cluster, text)
    for line in lines:
        print(line if rc in (EXIT_OK, EXIT_REFUSED) else f"gpu-cluster-accounting-sync: {line}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
