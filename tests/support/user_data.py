"""User data rendered for a catalog instance type."""

from __future__ import annotations

from functools import cache

from model.catalog import CATALOG
from model.config import parse_config
from userdata.render import FsxEndpoint, render_userdata

FSX = FsxEndpoint(dns_name="fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com", mount_name="abcdefgh")
URI = "s3://demo-bucket/gpu-cluster/demo/payload-{sha256}.tar.gz"


def config(nodes: int = 2, instance_type: str = "p5.48xlarge", **extra):
    return parse_config(
        {
            "name": "demo",
            "instance_type": instance_type,
            "network": {"availability_zone": "us-east-2b"},
            "capacity": {"nodes": nodes},
            **extra,
        }
    )


@cache
def rendered(instance_type: str = "p5.48xlarge", nodes: int = 2, uri: str = URI):
    """One render per distinct input (rendering is pure, so tests can share it)."""
    return render_userdata(config(nodes, instance_type), CATALOG[instance_type], FSX, uri)
