"""`node_iam`: extra permissions for the node role, within IAM's per-role quotas."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo, field_validator

from model import aws_rules
from model.base import Strict, got
from model.containers import ContainersConfig
from model.paths import loc_to_path
from model.registries import registry_access, registry_policy_document

# The node role's own managed policy (infra/iam.py attaches it); extra ARNs count
# against the same per-role quota.
SSM_CORE_POLICY_ARN = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
# Managed policies attached to one IAM role: 10 by default (adjustable through Service
# Quotas) [IAM-QUOTAS]. We stay within the default so a stack never depends on a raised
# quota nobody remembers asking for.
IAM_MANAGED_POLICIES_PER_ROLE = 10
# All inline policies of one role together: at most 10,240 characters, white space not
# counted [IAM-QUOTAS]. The program's own inline policies (the payload read: about 200
# characters with the longest bucket name) keep a reserve; node_iam.statements get the rest.
IAM_ROLE_INLINE_POLICY_CHARS = 10240
PROGRAM_INLINE_POLICY_RESERVE = 2048
MAX_NODE_IAM_STATEMENT_CHARS = IAM_ROLE_INLINE_POLICY_CHARS - PROGRAM_INLINE_POLICY_RESERVE


def _policy_arn(v: str) -> str:
    if not aws_rules.POLICY_ARN.match(v):
        raise ValueError(
            f"'{v}' is not an IAM managed policy ARN; use 'arn:aws:iam::aws:policy/NAME' (AWS managed) or "
            "'arn:aws:iam::123456789012:policy/NAME' (customer managed; partition aws, aws-cn or aws-us-gov)"
        )
    return v


def _one_or_many(v: Any) -> Any:
    """IAM takes one string or a list of them for Action and Resource; keep a list."""
    return (v,) if isinstance(v, str) else v


ConditionValue = str | bool | int | float | tuple[str | bool | int | float, ...]


class PolicyStatement(Strict):
    """One IAM policy statement, as in a policy document [IAM-JSON]. Principal, NotAction
    and NotResource are refused: an identity policy has no principal, and the negated
    forms grant everything not listed."""

    Sid: str | None = Field(None, description="Statement id: letters and digits, unique in node_iam.statements.")
    Effect: Literal["Allow", "Deny"] = Field(description="Allow or Deny.")
    Action: Annotated[tuple[str, ...], BeforeValidator(_one_or_many)] = Field(
        description="One action or a list ('service:Action', wildcards * and ? allowed; '*' alone is refused)."
    )
    Resource: Annotated[tuple[str, ...], BeforeValidator(_one_or_many)] = Field(
        description="One resource ARN or a list ('*' for all)."
    )
    Condition: dict[str, dict[str, ConditionValue]] | None = Field(
        None, description="IAM condition block: operator -> condition key -> value(s)."
    )

    @field_validator("Sid")
    @classmethod
    def _sid(cls, v: str | None) -> str | None:
        if v is not None and not aws_rules.IAM_SID.match(v):
            raise ValueError(f"'{v}' is not a valid Sid; IAM takes letters and digits only (e.g. 'ReadTrainingData')")
        return v

    @field_validator("Action")
    @classmethod
    def _action(cls, v: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        if not v:
            raise ValueError("empty; list at least one action such as 's3:GetObject'")
        for a in v:
            if a in ("*", "*:*") and info.data.get("Effect") == "Deny":
                raise ValueError(
                    f"'{a}' denies every action, the node's own SSM access and payload read included: no node "
                    "could boot; list the actions to deny"
                )
            if a in ("*", "*:*"):
                raise ValueError(
                    f"'{a}' is every action of every service: every job on the nodes would be an administrator; "
                    "list the actions the nodes need (e.g. 's3:GetObject'), or attach a managed policy that grants them"
                )
            if not aws_rules.IAM_ACTION.match(a):
                raise ValueError(
                    f"'{a}' is not an IAM action; write 'service:Action', e.g. 's3:GetObject' or 'ecr:Get*'"
                )
        return v

    @field_validator("Resource")
    @classmethod
    def _resource(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("empty; list at least one resource ARN, or '*'")
        for r in v:
            problem = None if r == "*" else aws_rules.arn_problem(r)
            if problem:
                raise ValueError(f"{problem}; or '*' for every resource")
        return v

    @field_validator("Condition", mode="before")
    @classmethod
    def _condition(cls, v: Any) -> Any:
        """Operators IAM has, and per key a value or a list of values: checked here so a
        refusal names the real key (the union's member types are not keys)."""
        if not isinstance(v, dict):
            return v
        for op, keys in v.items():
            problem = aws_rules.condition_operator_problem(str(op))
            if problem:
                raise ValueError(problem)
            if not isinstance(keys, dict):
                raise ValueError(
                    f"{op}: must be a mapping of condition keys to values, e.g. aws:RequestedRegion: us-east-2"
                )
            for key, value in keys.items():
                values = value if isinstance(value, list) else [value]
                if not values or any(isinstance(x, (dict, list)) or x is None for x in values):
                    raise ValueError(
                        f"{op}.{key}: a condition value is a string, number or true/false, or a list of them (got {got(value)})"
                    )
        return v

    def document(self) -> dict[str, Any]:
        """The statement as IAM JSON (one value stays a string, as it was written)."""
        out: dict[str, Any] = {}
        if self.Sid:
            out["Sid"] = self.Sid
        out["Effect"] = self.Effect
        out["Action"] = self.Action[0] if len(self.Action) == 1 else list(self.Action)
        out["Resource"] = self.Resource[0] if len(self.Resource) == 1 else list(self.Resource)
        if self.Condition:
            out["Condition"] = {
                op: {k: list(x) if isinstance(x, tuple) else x for k, x in keys.items()}
                for op, keys in self.Condition.items()
            }
        return out


def iam_policy_chars(document: dict[str, Any]) -> int:
    """Characters IAM counts for a policy document: everything but white space [IAM-QUOTAS]."""
    return len(re.sub(r"\s", "", json.dumps(document, sort_keys=True)))


def node_iam_policy(statements: tuple[PolicyStatement, ...]) -> dict[str, Any]:
    """The inline policy document made of node_iam.statements."""
    return {"Version": "2012-10-17", "Statement": [s.document() for s in statements]}


class NodeIamConfig(Strict):
    managed_policy_arns: tuple[Annotated[str, AfterValidator(_policy_arn)], ...] = Field(
        (),
        description=f"Extra managed policies for the node role (IAM's {IAM_MANAGED_POLICIES_PER_ROLE} per role, less the program's own).",
    )
    statements: tuple[PolicyStatement, ...] = Field(
        (), description="Extra IAM statements for the node role, as one inline policy."
    )

    @field_validator("managed_policy_arns")
    @classmethod
    def _arns(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for i, arn in enumerate(v):
            if v.index(arn) != i:
                raise ValueError(f"{arn} is listed twice (items {v.index(arn)} and {i}); list each policy once")
        partitions = sorted({arn.split(":")[1] for arn in v})
        if len(partitions) > 1:
            raise ValueError(
                f"the ARNs name partitions {', '.join(partitions)}; a role lives in one partition, "
                "so use the partition of the stack's region for all of them"
            )
        return v

    @field_validator("statements")
    @classmethod
    def _statements(cls, v: tuple[PolicyStatement, ...]) -> tuple[PolicyStatement, ...]:
        sids = [s.Sid for s in v if s.Sid]
        dup = sorted({s for s in sids if sids.count(s) > 1})
        if dup:
            raise ValueError(f"Sid {', '.join(dup)} is used more than once; IAM needs each Sid unique in a policy")
        if v:
            size = iam_policy_chars(node_iam_policy(v))
            if size > MAX_NODE_IAM_STATEMENT_CHARS:
                raise ValueError(
                    f"the statements come to {size} characters (white space not counted); IAM takes at most "
                    f"{IAM_ROLE_INLINE_POLICY_CHARS} for all inline policies of a role and the program keeps "
                    f"{PROGRAM_INLINE_POLICY_RESERVE} for its own, so stay within {MAX_NODE_IAM_STATEMENT_CHARS}: "
                    "merge statements or move them into a customer managed policy (node_iam.managed_policy_arns)"
                )
        return v


def program_managed_policy_arns() -> tuple[str, ...]:
    """Managed policies the program itself attaches to the node role (infra/iam.py)."""
    return (SSM_CORE_POLICY_ARN,)


def node_iam_problems(node_iam: NodeIamConfig) -> list[tuple[str, str]]:
    """What node_iam cannot hold beside what the program attaches itself."""
    arns, own = node_iam.managed_policy_arns, program_managed_policy_arns()
    path = loc_to_path(("node_iam", "managed_policy_arns"))
    problems = [
        (path, f"{arn} (item {i}) is attached to the node role already; remove it")
        for i, arn in enumerate(arns)
        if arn in own
    ]
    room = IAM_MANAGED_POLICIES_PER_ROLE - len(own)
    if len(arns) > room:
        problems.append(
            (
                path,
                f"{len(arns)} policies, but IAM attaches at most {IAM_MANAGED_POLICIES_PER_ROLE} managed policies to a "
                f"role by default and the program attaches {len(own)}; use at most {room}, or move permissions "
                "into node_iam.statements or one customer managed policy",
            )
        )
    return problems


def inline_policy_problems(
    node_iam: NodeIamConfig, containers: ContainersConfig, zone: str, cluster: str
) -> list[tuple[str, str]]:
    """All inline policies of the node role share IAM's 10,240 characters [IAM-QUOTAS]:
    the program's own (payload read, within PROGRAM_INLINE_POLICY_RESERVE), the
    `containers` policy (model/registries.py) and node_iam.statements. Checked here, not
    when IAM refuses the role policy after the network and FSx exist. Only called for a
    well-formed `containers` (its own problems say more)."""
    if not containers.enabled:
        return []
    region = aws_rules.az_region(zone)
    if region is None:
        return []  # reported as an AZ problem
    # Any 12-digit account gives the same length as the stack's own.
    access = registry_access(containers, region, "123456789012", cluster)
    assert access is not None  # containers.enabled
    registries = iam_policy_chars(registry_policy_document(access))
    statements = iam_policy_chars(node_iam_policy(node_iam.statements)) if node_iam.statements else 0
    total = PROGRAM_INLINE_POLICY_RESERVE + registries + statements
    if total <= IAM_ROLE_INLINE_POLICY_CHARS:
        return []
    return [
        (
            loc_to_path(("containers",)),
            f"the node role's inline policies come to about {total} characters (the registries' policy "
            f"{registries}, node_iam.statements {statements}, the program's own up to "
            f"{PROGRAM_INLINE_POLICY_RESERVE}); IAM takes {IAM_ROLE_INLINE_POLICY_CHARS} for all inline policies "
            "of a role: list fewer registries or secrets (one Secrets Manager secret can hold a login), or move "
            "node_iam.statements into a customer managed policy (node_iam.managed_policy_arns)",
        )
    ]


def partition_problems(node_iam: NodeIamConfig, containers: ContainersConfig, region: str) -> list[tuple[str, str]]:
    """Every ARN and ECR host the nodes use must be in aws:region's partition: IAM refuses
    to attach a managed policy of another partition, a statement naming one never matches,
    and a node cannot reach another partition's registry [IAM-ARN]."""
    out = []
    for i, st in enumerate(node_iam.statements):
        for j, r in enumerate(st.Resource):
            where = ("node_iam", "statements", i, "Resource") + ((j,) if len(st.Resource) > 1 else ())
            out.append((loc_to_path(where), aws_rules.arn_partition_problem(r, region)))
    for i, arn in enumerate(node_iam.managed_policy_arns):
        out.append((loc_to_path(("node_iam", "managed_policy_arns", i)), aws_rules.arn_partition_problem(arn, region)))
    for i, c in enumerate(containers.registry_credentials):
        if c.kind == "secretsmanager" and c.secret.startswith("arn:"):
            out.append(
                (
                    loc_to_path(("containers", "registry_credentials", i, "secret")),
                    aws_rules.arn_partition_problem(c.secret, region),
                )
            )
    if not isinstance(containers.ecr, bool):
        for i, entry in enumerate(containers.ecr):
            m = aws_rules.ECR_HOST.match(entry)
            theirs = aws_rules.partition_of(m.group(2)) if m else None
            ours = aws_rules.partition_of(region)
            if theirs and ours and theirs != ours:
                out.append(
                    (
                        loc_to_path(("containers", "ecr", i)),
                        f"'{entry}' is a registry in partition {theirs}, but aws:region {region} is in {ours}: "
                        "the nodes cannot pull across partitions; use a registry of the stack's partition",
                    )
                )
    return [(p, m) for p, m in out if m]
