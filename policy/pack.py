"""The rules of `policy/rules.py` as pulumi-policy resource policies [PP-SDK].

Every policy is mandatory: a violation fails `pulumi preview` and `pulumi up`, so a
stack that breaks an invariant never reaches AWS through a run that uses the pack.
"""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policy.rules import RULES, Rule

PACK_NAME = "gpu-cluster"


def _validator(rule: Rule):
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        # `protect` is a resource option, not an input: the engine hands it over in opts.
        protect = bool(getattr(args.opts, "protect", False))
        for message in rule.check(args.resource_type, args.props, protect):
            report_violation(message, args.urn)

    validate.__name__ = f"validate_{rule.name.replace('-', '_')}"
    return validate


def policies() -> list[ResourceValidationPolicy]:
    return [
        ResourceValidationPolicy(
            name=rule.name,
            description=rule.description,
            validate=_validator(rule),
            enforcement_level=EnforcementLevel.MANDATORY,
        )
        for rule in RULES
    ]
