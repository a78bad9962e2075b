"""IAM policy documents read the way the tests need them: which actions a policy allows,
and stubbed AWS that records every call it serves as its IAM action (shared by the
deployer policy's test and the bake policy's test)."""

from __future__ import annotations

import fnmatch

from tests.support.ops_stubs import Aws


def allowed(policy: dict) -> list[str]:
    actions = []
    for st in policy["Statement"]:
        a = st["Action"]
        actions += [a] if isinstance(a, str) else a
    return actions


def granted(policy: dict, action: str) -> bool:
    """The exact action, or a wildcard pattern within the same service (IAM action
    names are case-insensitive)."""
    service, _, name = action.partition(":")
    for pattern in allowed(policy):
        p_service, _, p_name = pattern.partition(":")
        if p_service.lower() == service.lower() and fnmatch.fnmatchcase(name.lower(), p_name.lower()):
            return True
    return False


class RecordingAws(Aws):
    """Stubbed AWS that records every API call as its IAM action."""

    def __init__(self, region: str = "us-east-2"):
        super().__init__(region)
        self.actions: set[str] = set()

    def stub(self, service: str):
        new = service not in self.stubbers
        stubber = super().stub(service)
        if new:
            client = self.clients[service]
            prefix = client.meta.service_model.signing_name

            def record(model, **_):
                self.actions.add(f"{prefix}:{model.name}")

            client.meta.events.register("before-parameter-build", record)
        return stubber
