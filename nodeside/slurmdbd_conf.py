#!/usr/bin/env python3
"""gpu-cluster-slurmdbd-conf: write slurmdbd.conf on the controller from the database secret.

Run by lib/accounting.sh at boot (step 50) and by the controller's agent loop every
ACCOUNTING_SECRET_REFRESH_INTERVAL seconds (RDS rotates the password every 7 days by
default [RDS-SM]). Reads the RDS-managed secret (JSON with `username` and `password`)
from Secrets Manager with the controller's role, fills the template
($SLURMDBD_CONF_TEMPLATE: @DBD_HOST@, @STORAGE_USER@, @STORAGE_PASS@) and replaces
$SLURMDBD_CONF (root, 0600, written atomically) only when it differs. Prints `changed`
or `unchanged`; the secret is never printed, logged or put in argv.

The local lanes have no Secrets Manager: GPU_CLUSTER_DB_SECRET_FILE (overrides.env)
names a root-only file holding the same JSON, and everything after the read is the same.

Exit: 0 written or unchanged; 2 bad settings or a secret Slurm cannot use; 3 the secret
cannot be read (AWS, the file); 4 internal error (GPU_CLUSTER_DEBUG=1: traceback).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

EXIT_OK, EXIT_BAD, EXIT_UNREACHABLE, EXIT_INTERNAL = 0, 2, 3, 4
# Slurm's config parser ends a value at an unescaped '#' and drops one level of
# backslashes (src/common/parse_config.c); an unquoted value ends at whitespace and a
# double quote opens a quoted one: those cannot be written safely at all.
_UNSAFE = set(" \t\r\n\"'")


class SecretError(Exception):
    """The secret could not be read (exit 3)."""


class BadSecret(Exception):
    """The secret was read but is unusable (exit 2); the message never holds its value."""


def slurm_escape(value: str) -> str:
    """`value` as Slurm's parser reads it back unchanged: `\\` -> `\\\\`, `#` -> `\\#`."""
    bad = sorted({c for c in value if c in _UNSAFE or ord(c) < 32})
    if bad:
        names = ", ".join(repr(c) for c in bad)
        raise BadSecret(f"the database password holds characters slurmdbd.conf cannot carry ({names})")
    return value.replace("\\", "\\\\").replace("#", "\\#")


def parse_secret(text: str) -> tuple[str, str]:
    try:
        doc = json.loads(text)
        user, password = doc["username"], doc["password"]
    except (ValueError, KeyError, TypeError):
        raise BadSecret('the database secret is not JSON {"username": ..., "password": ...}') from None
    if not (isinstance(user, str) and isinstance(password, str) and user and password):
        raise BadSecret("the database secret's username and password must be non-empty strings")
    return user, password


def _aws_client():
    """The controller agents' AWS layer (lib/aws_client.py beside bin/ on a node; the
    nodeside package in the repository): standard retries, endpoint swaps, one-line errors."""
    try:
        import aws_client  # type: ignore[import-not-found]
    except ImportError:
        home = os.environ.get("GPU_CLUSTER_HOME", "/opt/gpu-cluster")
        sys.path.insert(0, os.path.join(home, "lib"))
        try:
            import aws_client  # type: ignore[import-not-found,no-redef]
        except ImportError:
            from nodeside import aws_client  # type: ignore[no-redef]
    return aws_client


def read_secret(arn: str, region: str, client=None) -> str:
    """The secret's string from Secrets Manager (GetSecretValue on exactly `arn`)."""
    aws = _aws_client()
    try:
        sm = client or aws.client("secretsmanager", region or None)
        return aws.call(sm, "GetSecretValue", SecretId=arn)["SecretString"]
    except aws.AwsCallError as err:
        raise SecretError(f"cannot read the database secret {arn}: {err}") from None
    except Exception as err:  # noqa: BLE001 - no credentials, no route: "cannot read", one line
        raise SecretError(f"cannot read the database secret {arn}: {type(err).__name__}: {err}") from None


def secret_text(env: dict[str, str], client=None) -> str:
    local = env.get("GPU_CLUSTER_DB_SECRET_FILE")
    if local:
        try:
            return Path(local).read_text()
        except OSError as err:
            raise SecretError(f"cannot read the database secret file {local}: {err.strerror}") from None
    arn = env.get("ACCOUNTING_DB_SECRET_ARN", "")
    if not arn:
        raise BadSecret("ACCOUNTING_DB_SECRET_ARN is not set (cluster.env)")
    return read_secret(arn, env.get("ACCOUNTING_REGION", ""), client)


def render(template: str, dbd_host: str, user: str, password: str) -> str:
    if "@STORAGE_PASS@" not in template or "@DBD_HOST@" not in template:
        raise BadSecret("the slurmdbd.conf template lacks @DBD_HOST@ or @STORAGE_PASS@")
    out = template.replace("@DBD_HOST@", dbd_host).replace("@STORAGE_USER@", slurm_escape(user))
    return out.replace("@STORAGE_PASS@", slurm_escape(password))


def write_if_changed(path: Path, text: str) -> bool:
    """Replace `path` (0600) atomically unless it already holds `text`."""
    try:
        if path.read_text() == text and (path.stat().st_mode & 0o777) == 0o600:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".slurmdbd.conf.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def run(env: dict[str, str], client=None) -> tuple[int, str]:
    for key in ("SLURMDBD_CONF_TEMPLATE", "SLURMDBD_CONF", "NODE_NAME"):
        if not env.get(key):
            return EXIT_BAD, f"{key} is not set (cluster.env / identity.env)"
    try:
        template = Path(env["SLURMDBD_CONF_TEMPLATE"]).read_text()
    except OSError as err:
        return EXIT_UNREACHABLE, f"cannot read {env['SLURMDBD_CONF_TEMPLATE']}: {err.strerror}"
    try:
        user, password = parse_secret(secret_text(env, client))
        text = render(template, env["NODE_NAME"], user, password)
    except SecretError as err:
        return EXIT_UNREACHABLE, str(err)
    except BadSecret as err:
        return EXIT_BAD, str(err)
    changed = write_if_changed(Path(env["SLURMDBD_CONF"]), text)
    return EXIT_OK, "changed" if changed else "unchanged"


def main() -> int:
    try:
        rc, said = run(dict(os.environ))
    except Exception as err:  # noqa: BLE001 - one line, the traceback only on request
        if os.environ.get("GPU_CLUSTER_DEBUG") == "1":
            raise
        print(f"gpu-cluster-slurmdbd-conf: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_INTERNAL
    print(said if rc == EXIT_OK else f"gpu-cluster-slurmdbd-conf: {said}", file=sys.stdout if rc == 0 else sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
