"""Registry logins from stack secrets: one SSM SecureString parameter per secret.

`containers.registry_credentials` entries of `kind: stack` name a Pulumi secret
(`pulumi config set --secret gpu-cluster:registry_password_<name> ...`); this component
stores `{"login": ..., "password": ...}` in `/gpu-cluster/<cluster>/registry/<name>`
(SecureString, the account's aws/ssm key), which the node role may read and step 65
turns into Enroot's credentials file (docs/images.md). The value stays a Pulumi secret
end to end: encrypted in the state, `[secret]` in previews, never a stack output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component


def login_document(login: str, password: str) -> str:
    """The value nodes read: the same JSON users store themselves for kind ssm/secretsmanager."""
    return json.dumps({"login": login, "password": password}, sort_keys=True)


@dataclass
class RegistrySecretsArgs:
    cluster_name: str
    # stack secret name -> (SSM parameter name, login, password as a secret Output)
    secrets: dict[str, tuple[str, str, pulumi.Output[str]]]
    tags: dict[str, str] = field(default_factory=dict)


class RegistrySecrets(Component):
    """Outputs: parameter_names (list, for ordering the launch template after them)."""

    TYPE = "gpu-cluster:index:RegistrySecrets"
    parameter_names: pulumi.Output[list[str]]

    def __init__(self, name: str, args: RegistrySecretsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        names = []
        for secret, (param, login, password) in sorted(args.secrets.items()):
            value = pulumi.Output.secret(password).apply(lambda pw, login=login: login_document(login, pw))
            p = aws.ssm.Parameter(
                f"{name}-registry-{secret}",
                name=param,
                type="SecureString",
                value=value,
                description=f"gpu-cluster {args.cluster_name}: registry login from stack secret {secret}",
                tags=args.tags,
                opts=self.child,
            )
            names.append(p.name)
        self.parameter_names = pulumi.Output.all(*names)
        self.register_outputs({"parameter_names": self.parameter_names})
