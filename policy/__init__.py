"""The gpu-cluster policy pack: `pulumi preview --policy-pack policy/` (README).

`rules.py` holds the invariants as pure functions, `pack.py` wraps them as pulumi-policy
resource policies, `__main__.py` serves them to the Pulumi CLI.
"""
