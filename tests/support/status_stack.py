"""The stack and instance ids the status and replace tests share."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.ops_stubs import (
    CR,
)

CTRL, W1 = "i-0c000000000000001", "i-0b000000000000002"


def stack_dir(tmp_path: Path, **block_dates: str) -> Path:
    """`block_dates`: start= / end= of block a as the stack file declares them."""
    doc = {
        "config": {
            "aws:region": "us-east-2",
            "gpu-cluster:cluster": {
                "name": "dev",
                "instance_type": "p5.48xlarge",
                "network": {"availability_zone": "us-east-2b", "subnet_id": "subnet-0a1b2c3d4e5f60718"},
                "capacity": {
                    "nodes": 2,
                    "capacity_blocks": [
                        {
                            "name": "a",
                            "reservation_id": CR,
                            "instance_count": 2,
                            "availability_zone": "us-east-2b",
                            **block_dates,
                        }
                    ],
                },
            },
        }
    }
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path
