"""Private registries: `containers` config + region + account -> what nodes may read.

    registry_access(containers, region, account, cluster) -> RegistryAccess | None

Pure (no pulumi, no boto3). The one place registry hosts and the ARNs the node role
is granted are derived, so the IAM policy (`infra/iam.py`) and the node's
registries.conf (`userdata/registries.py`) cannot disagree. `account` is the stack's
own account (the program reads it once); it is needed for `ecr: true`, account ids and
secrets given by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.aws_rules import ECR_HOST
from model.containers import STACK_SECRET_PREFIX, ContainersConfig


@dataclass(frozen=True)
class Credential:
    registry: str  # host Enroot matches (`machine <registry>`)
    kind: str  # ssm | secretsmanager
    secret: str  # parameter name, or secret name/ARN, as the CLI takes it
    region: str  # where the parameter or secret lives
    arn: str  # what the node role may read (a name becomes `<name>-??????` [SM-ARN])


@dataclass(frozen=True)
class RegistryAccess:
    ecr_hosts: tuple[str, ...]  # sorted, unique
    credentials: tuple[Credential, ...]  # in config order

    @property
    def ecr_repository_arns(self) -> tuple[str, ...]:
        """Every repository of each listed registry (the pull actions are per repository)."""
        return tuple(sorted({ecr_repositories_arn(h) for h in self.ecr_hosts}))


def partition(region: str) -> tuple[str, str]:
    """(ARN partition, DNS suffix) of a region: China regions live in aws-cn under amazonaws.com.cn."""
    if region.startswith("cn-"):
        return "aws-cn", "amazonaws.com.cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov", "amazonaws.com"
    return "aws", "amazonaws.com"


def ecr_host(account: str, region: str) -> str:
    return f"{account}.dkr.ecr.{region}.{partition(region)[1]}"


def ecr_region(host: str) -> str:
    m = ECR_HOST.match(host)
    if m is None:
        raise ValueError(f"{host} is not an ECR registry host")
    return m.group(2)


def ecr_repositories_arn(host: str) -> str:
    m = ECR_HOST.match(host)
    if m is None:
        raise ValueError(f"{host} is not an ECR registry host")
    account, region = m.group(1), m.group(2)
    return f"arn:{partition(region)[0]}:ecr:{region}:{account}:repository/*"


def _credential(registry: str, kind: str, secret: str, region: str, account: str) -> Credential:
    part = partition(region)[0]
    if kind == "ssm":
        # A hierarchical name's leading '/' is the ARN's separator [SSM-NAMES].
        return Credential(
            registry, kind, secret, region, f"arn:{part}:ssm:{region}:{account}:parameter/{secret.lstrip('/')}"
        )
    if secret.startswith("arn:"):
        return Credential(registry, kind, secret, secret.split(":")[3], secret)
    # Secrets Manager appends '-' and six random characters to a secret's ARN [SM-ARN].
    return Credential(
        registry, kind, secret, region, f"arn:{part}:secretsmanager:{region}:{account}:secret:{secret}-??????"
    )


def stack_secret_key(secret: str) -> str:
    """The config key (in the gpu-cluster namespace) that holds a `kind: stack` password."""
    return f"{STACK_SECRET_PREFIX}{secret}"


def stack_parameter_name(cluster: str, secret: str) -> str:
    """The SSM SecureString the program creates from the stack secret `secret`."""
    return f"/gpu-cluster/{cluster}/registry/{secret}"


def stack_secrets(containers: ContainersConfig) -> dict[str, str]:
    """`kind: stack` secret name -> its login, each once."""
    out: dict[str, str] = {}
    for c in containers.registry_credentials:
        if c.kind == "stack":
            out.setdefault(c.secret, c.login or "")
    return out


def registry_access(containers: ContainersConfig, region: str, account: str, cluster: str) -> RegistryAccess | None:
    """None when nothing is configured (the node files and the role then stay as without `containers`).

    A `kind: stack` login becomes the SSM parameter the program stores it in."""
    if not containers.enabled:
        return None
    hosts: set[str] = set()
    if containers.ecr is True:
        hosts.add(ecr_host(account, region))
    elif containers.ecr:
        for entry in containers.ecr:
            hosts.add(entry if ECR_HOST.match(entry) else ecr_host(entry, region))
    creds = tuple(
        _credential(c.registry, "ssm", stack_parameter_name(cluster, c.secret), region, account)
        if c.kind == "stack"
        else _credential(c.registry, c.kind, c.secret, region, account)
        for c in containers.registry_credentials
    )
    return RegistryAccess(ecr_hosts=tuple(sorted(hosts)), credentials=creds)


def needs_account(containers: ContainersConfig) -> bool:
    """Whether resolving needs the stack's account id (else the program need not look it up)."""
    if containers.ecr is True:
        return True
    if containers.ecr and any(not ECR_HOST.match(e) for e in containers.ecr):
        return True
    return any(c.kind == "stack" or not c.secret.startswith("arn:") for c in containers.registry_credentials)


# Pulling an image from ECR: the token (registry level, no resource-level permission, so
# Resource "*") and the three per-repository read actions [ECR-AUTH] [ECR-IAM].
ECR_TOKEN_ACTION = "ecr:GetAuthorizationToken"
ECR_PULL_ACTIONS = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]


def registry_policy_document(access: RegistryAccess) -> dict:
    """ECR pulls from the listed registries and reads of exactly the named registry secrets.

    No kms:Decrypt: SecureString parameters and secrets encrypted with the AWS managed
    keys (aws/ssm, aws/secretsmanager) are decrypted through the service for any
    principal of the account allowed to read them [SSM-KMS] [SM-KMS]; a customer
    managed key needs a grant of its own (docs/images.md).
    """
    statements: list[dict] = []
    if access.ecr_hosts:
        statements.append({"Sid": "EcrToken", "Effect": "Allow", "Action": ECR_TOKEN_ACTION, "Resource": "*"})
        statements.append(
            {
                "Sid": "EcrPull",
                "Effect": "Allow",
                "Action": ECR_PULL_ACTIONS,
                "Resource": list(access.ecr_repository_arns),
            }
        )
    ssm = sorted({c.arn for c in access.credentials if c.kind == "ssm"})
    if ssm:
        statements.append(
            {"Sid": "RegistryParameters", "Effect": "Allow", "Action": "ssm:GetParameter", "Resource": ssm}
        )
    sm = sorted({c.arn for c in access.credentials if c.kind == "secretsmanager"})
    if sm:
        statements.append(
            {"Sid": "RegistrySecrets", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": sm}
        )
    return {"Version": "2012-10-17", "Statement": statements}
