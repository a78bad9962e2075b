"""The team lane: accounting on a real MariaDB, users, and a login machine.

On AWS the accounting database is an RDS for MariaDB instance (infra/accounting.py);
here it is Debian's MariaDB server (the same 10.11 series on bookworm) in its own
network namespace on the cluster's bridge, at a fixed address, with its data under the
cluster's state directory: like RDS it is neither a node nor on a node, so it outlives
a controller replacement and a whole-cluster relaunch. Its login is a random password
(holding `#` and `\\`, which Slurm's config parser treats specially) in a root-only JSON
file shaped like the RDS-managed secret; the controller machine gets that file and
GPU_CLUSTER_DB_SECRET_FILE in its overrides.env (the lanes have no Secrets Manager: the
documented swap). Everything the controller does with it is the shipped code.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time

from localcluster.nodes import NETNS_DIR, Cluster, sh
from model import accounting

# The database's address on the cluster's /24: below the nodes' 10 + serial.
DB_OCTET = 9
SECRET_ON_CONTROLLER = "/etc/gpu-cluster/db-secret.json"
# The lane's people: two users in two accounts, one with a default QOS; bob is a Slurm admin.
USERS = (
    {"name": "alice", "uid": 2001, "account": "physics"},
    {"name": "bob", "uid": 2002, "account": "vision", "admin": True, "default_qos": "interactive"},
)


def team_raw(login_count: int = 1) -> dict:
    """The stack keys the team lane adds (model/accounting.py, model/users.py, model/login.py)."""
    return {
        # the lane's stack names an existing subnet (profile.local_config), so RDS's second one too
        "accounting": {"enabled": True, "second_subnet_id": "subnet-0b1b2c3d4e5f60719"},
        "users": [dict(u) for u in USERS],
        "login": {"count": login_count},
    }


class LocalDatabase:
    """mariadbd in netns `gcl-<cluster>-db`; Cluster.down() removes it with the rest."""

    def __init__(self, cluster: Cluster):
        self.c = cluster
        self.netns = f"gcl-{cluster.name}-db"
        self.veth = f"gcl{cluster.name}db"[:15]
        self.ip = f"10.77.{cluster.subnet}.{DB_OCTET}"
        self.dir = cluster.root / "database"
        self.datadir = self.dir / "data"
        self.socket = self.dir / "mysqld.sock"
        self.secret_file = self.dir / "secret.json"

    def _net(self) -> None:
        self.c.ensure_network()
        if (NETNS_DIR / self.netns).exists():
            return
        sh("ip", "netns", "add", self.netns)
        sh(
            "ip",
            "-n",
            self.c.hub,
            "link",
            "add",
            self.veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            self.netns,
        )
        sh("ip", "-n", self.c.hub, "link", "set", self.veth, "master", "br0", "up")
        sh("ip", "-n", self.netns, "addr", "add", f"{self.ip}/24", "dev", "eth0")
        sh("ip", "-n", self.netns, "link", "set", "eth0", "up")
        sh("ip", "-n", self.netns, "link", "set", "lo", "up")

    def sql(self, statement: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["mariadb", "--no-defaults", "-S", str(self.socket), "-u", "root", "-N", "-B", "-e", statement],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def running(self) -> bool:
        return self.socket.exists() and self.sql("SELECT 1").returncode == 0

    def start(self, timeout: float = 60) -> None:
        """Create (first time) and start the server; make the slurmdbd login and its secret."""
        self._net()
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.running():
            return
        if not (self.datadir / "mysql").is_dir():
            sh(
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.datadir}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            )
        argv = [
            "nsenter",
            f"--net={NETNS_DIR / self.netns}",
            "setsid",
            "mariadbd",
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket}",
            f"--pid-file={self.dir / 'mariadbd.pid'}",
            f"--log-error={self.dir / 'error.log'}",
            f"--bind-address={self.ip}",
            f"--port={accounting.PORT}",
            "--user=root",
            "--skip-name-resolve",
            # Slurm's accounting guide's setting, as the RDS parameter group sets it
            "--innodb-lock-wait-timeout=900",
        ]
        with open(self.dir / "console.log", "ab") as log:
            subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not self.running():
            if time.monotonic() > deadline:
                tail = (self.dir / "error.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"MariaDB did not start within {timeout:.0f}s: {tail}")
            time.sleep(0.3)
        self._login()

    def _login(self) -> None:
        if self.secret_file.exists():
            return
        password = f"{secrets.token_urlsafe(12)}#{secrets.token_urlsafe(6)}\\{secrets.token_hex(3)}"
        literal = password.replace("\\", "\\\\").replace("'", "\\'")
        user = accounting.MASTER_USER
        r = self.sql(
            f"CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY '{literal}'; "
            f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'%' WITH GRANT OPTION; FLUSH PRIVILEGES;"
        )
        if r.returncode != 0:
            raise RuntimeError(f"creating the {user} login failed: {r.stderr.strip()}")
        doc = {"username": user, "password": password, "engine": accounting.ENGINE, "host": self.ip}
        self.secret_file.write_text(json.dumps(doc))
        self.secret_file.chmod(0o600)

    def secret_bytes(self) -> bytes:
        return self.secret_file.read_bytes()

    def tables(self) -> list[str]:
        r = self.sql(f"SHOW TABLES FROM {accounting.DATABASE}")
        return r.stdout.split() if r.returncode == 0 else []


def controller_files(db: LocalDatabase) -> dict[str, tuple[bytes, int, str]]:
    """What the lane's controller machine gets besides the user data: the secret file."""
    return {SECRET_ON_CONTROLLER: (db.secret_bytes(), 0o600, "root:root")}


def controller_swaps() -> dict[str, str]:
    return {"GPU_CLUSTER_DB_SECRET_FILE": SECRET_ON_CONTROLLER}
