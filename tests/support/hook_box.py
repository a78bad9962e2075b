"""A boot sandbox with the on-node-ready step and its hooks laid down."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.boot_sandbox import Sandbox

STEP = Path(__file__).resolve().parents[2] / "nodeside/steps/99-on-node-ready.sh"


class HookBox(Sandbox):
    """The entry point sandbox with the shipped step 99, a stand-in for steps 10-50
    (identity and controller address) and a hook."""

    def __init__(self, root: Path, role: str = "worker", timeout: int = 30, run_on: str = "all"):
        super().__init__(root)
        self.hook_path = self.home / "hooks" / "on-node-ready"
        self.hook_log = self.log_dir / "on-node-ready.log"
        self.hook_status = self.state / "on-node-ready.json"
        self.markers = self.fsx_root / "hooks" / "on-node-ready"
        with (self.etc / "cluster.env").open("a") as f:
            f.write(
                "INSTANCE_TYPE=p5.48xlarge\nSLURM_PARTITION=train\n"
                f"ON_NODE_READY_SCRIPT={self.hook_path}\nON_NODE_READY_LOG={self.hook_log}\n"
                f"ON_NODE_READY_STATUS={self.hook_status}\nON_NODE_READY_MARKERS={self.markers}\n"
                f"ON_NODE_READY_TIMEOUT={timeout}\nON_NODE_READY_RUN_ON={run_on}\n"
            )
        self.step(
            "10-identity",
            f"""cat >"$GPU_CLUSTER_STATE/identity.env" <<'E'
INSTANCE_ID='i-0abc'
NODE_ADDR='10.0.0.5'
NODE_NAME='ip-10-0-0-5'
NODE_ROLE='{role}'
E
printf "CONTROLLER_HOST='ip-10-0-0-4'\\nCONTROLLER_ADDR='10.0.0.4'\\n" >"$GPU_CLUSTER_STATE/controller.env"
""",
        )
        shutil.copy(STEP, self.home / "steps" / STEP.name)

    def hook(self, body: str) -> None:
        self.hook_path.parent.mkdir(parents=True, exist_ok=True)
        self.hook_path.write_text("#!/bin/bash\n" + body + "\n")
        self.hook_path.chmod(0o755)

    def hook_marker(self) -> dict:
        return json.loads(self.hook_status.read_text())
