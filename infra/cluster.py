"""Top-level wiring: parsed config -> components -> stack outputs.

`build(cfg, region)` is the whole program; `infra/stack.py` (pulumi up) and
`infra/render.py` (offline, under mocks) both call it. Components get plain values
and Outputs, never `pulumi.Config`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from infra.config import ClusterConfig, ConfigError
from infra.iam import NodeIdentity, NodeIdentityArgs
from infra.launch_template import (NodeLaunchTemplate, NodeLaunchTemplateArgs, encode_user_data,
                                   image_id, render_user_data)
from infra.network import Network, NetworkArgs, check_existing_subnet
from infra.nodes import ON_DEMAND, NodeGroupArgs, NodeGroupAsg
from infra.security import NodeSecurityGroup, NodeSecurityGroupArgs
from infra.storage import FileSystem, FileSystemArgs


@dataclass
class BuildResult:
    outputs: dict[str, object]  # stack outputs (values may be Outputs)
    node_files: pulumi.Output  # Output[userdata.render.NodeFiles], shared by all templates


def validation_results_path(cluster_name: str) -> str:
    return f"/fsx/.gpu-cluster/{cluster_name}/validation/"


def controller_commands(region: str, controller_asg: str) -> tuple[str, str]:
    """(command printing the controller's instance id, command opening a shell on it).

    The id is not known at `pulumi up`: the group launches the instance (maybe when the
    block starts), and a replaced controller gets a new id. The group name is stable.
    """
    find = (f"aws autoscaling describe-auto-scaling-groups --region {region} "
            f"--auto-scaling-group-names {controller_asg} "
            "--query \"AutoScalingGroups[0].Instances[?LifecycleState=='InService'] | [0].InstanceId\" "
            "--output text")
    return find, f"aws ssm start-session --region {region} --target $({find})"


def preflight(cfg: ClusterConfig) -> None:
    """Checks that need AWS reads (data sources only); raise ConfigError before resources."""
    problems = []
    if cfg.network.subnet_id:
        problems += check_existing_subnet(cfg.network.subnet_id, cfg.network.availability_zone)
    if problems:
        raise ConfigError(problems)


def build(cfg: ClusterConfig, region: str) -> BuildResult:
    preflight(cfg)
    name = cfg.name
    spec = cfg.spec
    tags = {**cfg.tags, "GpuClusterName": name}

    net = Network(name, NetworkArgs(cluster_name=name, availability_zone=cfg.network.availability_zone,
                                    subnet_id=cfg.network.subnet_id, vpc_cidr=cfg.network.vpc_cidr, tags=tags))
    sg = NodeSecurityGroup(name, NodeSecurityGroupArgs(cluster_name=name, vpc_id=net.vpc_id, tags=tags))
    fsx = FileSystem(name, FileSystemArgs(cluster_name=name, fsx=cfg.fsx, subnet_id=net.subnet_id,
                                          security_group_id=sg.security_group_id, tags=tags))
    identity = NodeIdentity(name, NodeIdentityArgs(cluster_name=name, tags=tags))

    # One render for the whole cluster: the bytes do not depend on node count or block
    # (node contract), so every template carries the same user data.
    node_files = render_user_data(cfg, spec, fsx.dns_name, fsx.mount_name)
    user_data_b64 = node_files.apply(encode_user_data)

    templates: dict[str, NodeLaunchTemplate] = {}
    placements = [b for b in cfg.capacity.capacity_blocks] or [None]
    for block in placements:
        tname = f"block-{block.name}" if block is not None else ON_DEMAND
        templates[tname] = NodeLaunchTemplate(f"{name}-{tname}", NodeLaunchTemplateArgs(
            cluster_name=name, template_name=tname, spec=spec, image_id=image_id(cfg),
            security_group_id=sg.security_group_id,
            instance_profile_arn=identity.instance_profile_arn,
            user_data_base64=user_data_b64, root_volume=cfg.root_volume,
            capacity_block=block, placement_group=cfg.uses_placement_group, tags=tags))

    groups: dict[str, NodeGroupAsg] = {}
    for g in cfg.node_groups():
        if g.size == 0:
            continue  # a 1-node-per-block remainder: nothing to launch in this block
        lt = templates[f"block-{g.block.name}" if g.block is not None else ON_DEMAND]
        groups[g.name] = NodeGroupAsg(f"{name}-{g.name}", NodeGroupArgs(
            cluster_name=name, group=g, total_nodes=cfg.capacity.nodes, subnet_id=net.subnet_id,
            launch_template_id=lt.launch_template_id, launch_template_version=lt.latest_version,
            tags=cfg.tags))

    controller = groups["controller"]
    find_cmd = controller.asg_name.apply(lambda n: controller_commands(region, n)[0])
    ssm_cmd = controller.asg_name.apply(lambda n: controller_commands(region, n)[1])
    outputs: dict[str, object] = {
        "cluster_name": name,
        "region": region,
        "subnet_id": net.subnet_id,
        "security_group_id": sg.security_group_id,
        "controller_asg_name": controller.asg_name,
        "controller_instance_id_command": find_cmd,
        "controller_ssm_command": ssm_cmd,
        "fsx_dns_name": fsx.dns_name,
        "fsx_mount_name": fsx.mount_name,
        "launch_templates": {k: {"id": t.launch_template_id, "version": t.latest_version}
                             for k, t in templates.items()},
        "node_groups": {k: {"asg_name": g.asg_name, "role": g_cfg.role, "size": g_cfg.size,
                            "block": g_cfg.block.name if g_cfg.block is not None else ON_DEMAND}
                        for g_cfg in cfg.node_groups() if g_cfg.name in groups
                        for k, g in [(g_cfg.name, groups[g_cfg.name])]},
        "capacity_block_ids": [b.reservation_id for b in cfg.capacity.capacity_blocks],
        "validation_results_path": validation_results_path(name),
    }
    return BuildResult(outputs=outputs, node_files=node_files)
