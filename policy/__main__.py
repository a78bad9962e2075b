"""Entry point the Pulumi CLI runs for `--policy-pack policy/`: serves the pack.

The CLI starts this file with the pack directory as the working directory; the
repository root goes on the path so the rules share `model/tags.py` with the program.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policy.pack import PACK_NAME, policies  # noqa: E402

PolicyPack(name=PACK_NAME, policies=policies(), enforcement_level=EnforcementLevel.MANDATORY)
