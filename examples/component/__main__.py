"""A program of your own that declares a gpu-cluster cluster as one component."""

import pulumi

from gpu_cluster import GpuCluster

cluster = GpuCluster(
    "training",
    config=pulumi.Config().require_object("cluster"),
    region=pulumi.Config("aws").require("region"),
)

pulumi.export("controller_ssm_command", cluster.outputs["controller_ssm_command"])
pulumi.export("fsx_dns_name", cluster.outputs["fsx_dns_name"])
pulumi.export("node_groups", cluster.outputs["node_groups"])
