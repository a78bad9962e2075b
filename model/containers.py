"""`containers`: private registries (docs/images.md "Private images"): ECR access and logins."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from model import aws_rules
from model.base import Strict
from model.paths import loc_to_path

# A stack secret's short name: the config key `gpu-cluster:registry_password_<name>` and
# the last component of the SSM parameter the program creates from it.
_STACK_SECRET = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
STACK_SECRET_PREFIX = "registry_password_"


class RegistryCredential(Strict):
    registry: str = Field(description="Registry host the login is for, as in the image name (e.g. nvcr.io).")
    kind: Literal["ssm", "secretsmanager", "stack"] = Field(
        description="Where the secret lives: an SSM SecureString parameter, a Secrets Manager secret, or a stack secret the program stores in SSM."
    )
    secret: str = Field(
        description='ssm: parameter name; secretsmanager: secret name or ARN (value: JSON {"login": ..., "password": ...}); stack: short name of the stack secret gpu-cluster:registry_password_<secret>.'
    )
    login: str | None = Field(
        None, description="kind stack only: the login that goes with the stack secret (e.g. $oauthtoken for NGC)."
    )


class ContainersConfig(Strict):
    ecr: bool | tuple[str, ...] = Field(
        False,
        description="ECR registries nodes may pull from: true for this account's registry in the stack's region, or a list of account ids / registry hosts.",
    )
    registry_credentials: tuple[RegistryCredential, ...] = Field(
        (), description="Logins for other registries (NGC, a private registry), read by the nodes at boot."
    )

    @field_validator("ecr", mode="before")
    @classmethod
    def _ecr_shape(cls, v: Any) -> Any:
        if isinstance(v, bool):
            return v
        if not isinstance(v, (list, tuple)):
            raise ValueError(f"{v!r} is not true/false or a list; use true, or a list of account ids or ECR hosts")
        for item in v:
            if not isinstance(item, str):
                raise ValueError(
                    f"{item!r} is not a string; quote account ids in YAML ('123456789012': a number loses leading zeros)"
                )
        return v

    @property
    def enabled(self) -> bool:
        return bool(self.ecr) or bool(self.registry_credentials)


# A `secret` takes a reference (a parameter or secret name); a value pasted there may be
# the credential itself, so a refusal describes it without repeating it.
SECRET_NOT_SHOWN = "the value is not shown: it may be the credential itself"


def _path(*parts: str | int) -> str:
    return loc_to_path(("containers", *parts))


def _ecr_problems(ecr: tuple[str, ...]) -> list[tuple[str, str]]:
    problems = []
    if not ecr:
        problems.append(
            (_path("ecr"), "an empty list grants nothing; use true, a list of account ids or hosts, or remove it")
        )
    for i, entry in enumerate(ecr):
        if not (aws_rules.ACCOUNT_ID.match(entry) or aws_rules.ECR_HOST.match(entry)):
            problems.append(
                (
                    _path("ecr", i),
                    f"'{entry}' is neither a 12-digit account id nor an ECR registry host; use e.g. '123456789012' or '123456789012.dkr.ecr.us-east-2.amazonaws.com' (quote account ids in YAML)",
                )
            )
        elif list(ecr).index(entry) != i:
            problems.append((_path("ecr", i), f"'{entry}' is listed twice; list each registry once"))
        elif problem := aws_rules.ecr_host_problem(entry):
            problems.append((_path("ecr", i), problem))
    return problems


def _registry_problem(r: RegistryCredential, i: int, hosts: list[str]) -> str | None:
    if aws_rules.ECR_HOST.match(r.registry) or ".dkr.ecr." in r.registry:
        return f"'{r.registry}' is an ECR registry: nodes log in to it with ECR tokens; list it (or its account id) under containers.ecr instead"
    if not aws_rules.REGISTRY_HOST.match(r.registry):
        return f"'{r.registry}' is not a registry host; use the host part of the image name in lowercase, e.g. 'nvcr.io' or 'registry.example.com:5000' (no scheme, no path)"
    if hosts.index(hosts[i]) != i:
        return f"'{hosts[i]}' has a login already; Enroot uses one login per host name (ports aside), so list each registry once"
    return None


def _ssm_secret_problem(r: RegistryCredential) -> str | None:
    if r.kind != "ssm":
        return None
    if aws_rules.SSM_RESERVED_PREFIX.match(r.secret):
        return "the parameter name starts with 'aws' or 'ssm', which SSM reserves; use your own path, e.g. '/gpu-cluster/ngc'"
    if not aws_rules.is_ssm_parameter_name(r.secret):
        return f"not an SSM parameter name ({SECRET_NOT_SHOWN}); give the parameter's name, letters, digits, '.', '-', '_' and '/', e.g. '/gpu-cluster/ngc' (the name, not its ARN or its value)"
    return None


def _stack_problems(c: ContainersConfig, r: RegistryCredential) -> list[tuple[str, str]]:
    """A stack secret's name and the login beside it (only kind stack takes a login)."""
    if r.kind != "stack":
        if r.login is None:
            return []
        return [
            (
                "login",
                f'only used with kind stack; for kind {r.kind} the login is inside the secret (JSON {{"login": ..., "password": ...}}); remove it',
            )
        ]
    problems = []
    if not _STACK_SECRET.match(r.secret):
        problems.append(
            (
                "secret",
                f"not a stack secret name ({SECRET_NOT_SHOWN}); use 1-40 lowercase letters, digits or '_', starting with a letter, e.g. 'ngc' (the config key is gpu-cluster:{STACK_SECRET_PREFIX}<secret>; the password itself goes there, with --secret)",
            )
        )
    if r.login is None:
        problems.append(
            ("login", "required with kind stack (the stack secret holds only the password); e.g. '$oauthtoken' for NGC")
        )
    elif not r.login or any(ch.isspace() for ch in r.login):
        problems.append(("login", f"{r.login!r} is empty or has a blank; Enroot's credentials file splits on blanks"))
    first = next(x for x in c.registry_credentials if x.kind == "stack" and x.secret == r.secret)
    if first.login != r.login and r.login is not None:
        problems.append(
            (
                "login",
                f"stack secret '{r.secret}' is used with login {first.login!r} already; one stack secret stores one login (use another secret name)",
            )
        )
    return problems


def _credential_problems(c: ContainersConfig, i: int, hosts: list[str]) -> list[tuple[str, str]]:
    r = c.registry_credentials[i]
    found: list[tuple[str, str | None]] = [("registry", _registry_problem(r, i, hosts))]
    found.append(("secret", _ssm_secret_problem(r)))
    found += _stack_problems(c, r)
    if r.kind == "secretsmanager" and not (aws_rules.SM_NAME.match(r.secret) or aws_rules.SM_ARN.match(r.secret)):
        found.append(
            (
                "secret",
                f"neither a Secrets Manager secret name nor a secret ARN ({SECRET_NOT_SHOWN}); give the secret's name (letters, digits and /_+=.@-, e.g. 'ngc-login') or its ARN (arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 characters>), not its value",
            )
        )
    return [(_path("registry_credentials", i, key), message) for key, message in found if message]


def containers_problems(c: ContainersConfig) -> list[tuple[str, str]]:
    """Registry hosts and secret ids: shapes AWS and Enroot accept, nothing listed twice."""
    problems = [] if isinstance(c.ecr, bool) else _ecr_problems(c.ecr)
    # Enroot matches a login by host name, without the port [ENROOT-IMPORT].
    hosts = [r.registry.split(":")[0] for r in c.registry_credentials]
    for i in range(len(c.registry_credentials)):
        problems += _credential_problems(c, i, hosts)
    return problems
