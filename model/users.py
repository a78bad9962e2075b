"""`users`: the people who share the cluster.

Each entry becomes the same POSIX account on every node and login node (same uid and
primary gid everywhere, which jobs, /fsx and Enroot need), a home under
/fsx/home/<name>, and a Slurm association (user in its account, optional default QOS,
optional Slurm administrator) registered by the controller's boot (sacctmgr -i,
idempotently). Associations live in slurmdbd, so `users` needs `accounting`.

What is refused, and why:
- a name of an account the image or its daemons own (root, ubuntu, ssm-user, munge,
  slurm, ...): useradd would fail on one node and the uid of the other would win;
- uids/gids below 2000: 0-999 are system accounts (Debian/Ubuntu SYS_UID_MAX [DEB-UID]),
  1000 is the image's `ubuntu` and Session Manager creates `ssm-user` at the next free
  uid from 1001 [SSM-RUNAS]; above 60000 is beyond UID_MAX (nobody 65534, systemd's
  dynamic users 61184-65519);
- duplicate names or uids, and a gid whose group name differs between entries.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from model.base import Strict
from model.paths import loc_to_path

UID_MIN, UID_MAX = 2000, 60000
HOME_ROOT = "/fsx/home"
# Slurm's own account every cluster has; users go into accounts of their own.
SLURM_ROOT_ACCOUNT = "root"
# Accounts on the DLAMI (Ubuntu 24.04), Debian's base system, and the daemons and
# agents the nodes run: never a cluster user's name.
RESERVED_NAMES = frozenset(
    {
        "root",
        "daemon",
        "bin",
        "sys",
        "sync",
        "games",
        "man",
        "lp",
        "mail",
        "news",
        "uucp",
        "proxy",
        "www-data",
        "backup",
        "list",
        "irc",
        "gnats",
        "nobody",
        "_apt",
        "systemd-network",
        "systemd-resolve",
        "systemd-timesync",
        "systemd-journal",
        "systemd-coredump",
        "messagebus",
        "syslog",
        "uuidd",
        "tcpdump",
        "tss",
        "landscape",
        "fwupd-refresh",
        "usbmux",
        "sshd",
        "polkitd",
        "lxd",
        "dnsmasq",
        "pollinate",
        "ubuntu",
        "ssm-user",
        "ec2-user",
        "admin",
        "munge",
        "slurm",
        "slurmdbd",
        "mysql",
        "dcgm",
        "nvidia-persistenced",
        "enroot",
    }
)
_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_ACCOUNT = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_QOS = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class UserConfig(Strict):
    name: str = Field(description="Login name (POSIX and Slurm).")
    uid: int = Field(description=f"User id, the same on every node ({UID_MIN}-{UID_MAX}).")
    gid: int | None = Field(None, description="Primary group id; defaults to the uid (a group of its own).")
    group: str | None = Field(
        None, description="Primary group name; defaults to the user's name (entries sharing a gid share it)."
    )
    account: str = Field(description="Slurm account the user's jobs are charged to (created if missing).")
    admin: bool = Field(False, description="Slurm administrator (AdminLevel=Administrator): may manage any job.")
    default_qos: str | None = Field(None, description="The user's default QOS (created if missing).")

    @field_validator("name", "group")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not _NAME.match(v):
            raise ValueError(
                f"'{v}' is not a valid login name; use up to 32 lowercase letters, digits, '_' or '-', starting with a letter or '_'"
            )
        if v in RESERVED_NAMES or v.startswith("systemd-"):
            raise ValueError(
                f"'{v}' is an account the image or its daemons already own; choose another name (e.g. '{v}1' or a person's name)"
            )
        return v

    @field_validator("uid", "gid")
    @classmethod
    def _id(cls, v: int | None) -> int | None:
        if v is not None and not UID_MIN <= v <= UID_MAX:
            raise ValueError(
                f"{v} is outside {UID_MIN}-{UID_MAX}: below is the system range and the image's own logins "
                "(ubuntu 1000, ssm-user from 1001), above is beyond UID_MAX; pick an id in the range"
            )
        return v

    @field_validator("account")
    @classmethod
    def _account(cls, v: str) -> str:
        if not _ACCOUNT.match(v) or v == SLURM_ROOT_ACCOUNT:
            raise ValueError(
                f"'{v}' is not a usable Slurm account; use up to 32 lowercase letters, digits, '_' or '-' (not 'root')"
            )
        return v

    @field_validator("default_qos")
    @classmethod
    def _qos(cls, v: str | None) -> str | None:
        if v is not None and not _QOS.match(v):
            raise ValueError(f"'{v}' is not a valid QOS name; use up to 32 lowercase letters, digits, '_' or '-'")
        return v

    @property
    def primary_gid(self) -> int:
        return self.gid if self.gid is not None else self.uid

    @property
    def group_name(self) -> str:
        return self.group or self.name

    @property
    def home(self) -> str:
        return f"{HOME_ROOT}/{self.name}"


def _p(i: int, key: str) -> str:
    return loc_to_path(("users", i, key))


def users_problems(users: tuple[UserConfig, ...], accounting_enabled: bool) -> list[tuple[str, str]]:
    """Duplicates across entries, groups that disagree, and the accounting they need."""
    problems: list[tuple[str, str]] = []
    if users and not accounting_enabled:
        problems.append(
            (
                loc_to_path(("users",)),
                "needs accounting.enabled: true: each user's Slurm account, fair share and QOS live in slurmdbd; "
                "enable accounting or remove users",
            )
        )
    names: dict[str, int] = {}
    uids: dict[int, int] = {}
    gids: dict[int, str] = {}
    groups: dict[str, int] = {}
    for i, u in enumerate(users):
        if u.name in names:
            problems.append((_p(i, "name"), f"'{u.name}' is already users[{names[u.name]}]; names must be unique"))
        names.setdefault(u.name, i)
        if u.uid in uids:
            problems.append(
                (_p(i, "uid"), f"{u.uid} is already the uid of users[{uids[u.uid]}]; each user needs their own uid")
            )
        uids.setdefault(u.uid, i)
        gid, group = u.primary_gid, u.group_name
        if gids.get(gid, group) != group:
            problems.append(
                (
                    _p(i, "group"),
                    f"gid {gid} is group '{gids[gid]}' in an earlier entry, not '{group}'; set the same group: for every user sharing a gid",
                )
            )
        elif groups.get(group, gid) != gid:
            problems.append(
                (
                    _p(i, "gid"),
                    f"group '{group}' has gid {groups[group]} in an earlier entry, not {gid}; use one gid per group",
                )
            )
        gids.setdefault(gid, group)
        groups.setdefault(group, gid)
    return problems


def users_conf(users: tuple[UserConfig, ...]) -> str:
    """/etc/gpu-cluster/users.conf: one line per user, read by step 35 and the controller's
    association sync: `name uid group gid account admin(0|1) default_qos(-)`."""
    lines = ["# name uid group gid account admin default_qos (generated by gpu-cluster; do not edit)"]
    for u in users:
        lines.append(
            f"{u.name} {u.uid} {u.group_name} {u.primary_gid} {u.account} {int(u.admin)} {u.default_qos or '-'}"
        )
    return "\n".join(lines) + "\n"
