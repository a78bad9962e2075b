"""Entry point the Pulumi CLI runs for `--policy-pack policy/`: serves the pack.

The CLI starts this file with the pack directory as the working directory, in the
virtualenv PulumiPolicy.yaml names. The rules come from the installed gpu-cluster
package (`policy.rules`, which shares the tag names in `model/tags.py` with the
program), never from the repository's root: the pack directory published on its own
(`pulumi policy publish`) needs only `gpu-cluster` installed (requirements.txt).
"""

from pulumi_policy import EnforcementLevel, PolicyPack

from policy.pack import PACK_NAME, policies

PolicyPack(name=PACK_NAME, policies=policies(), enforcement_level=EnforcementLevel.MANDATORY)
