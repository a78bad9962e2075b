"""The CloudWatch agent's configuration and the metrics settings (`logs`, docs/logs.md).

Pure (no pulumi). Two JSON files in the agent's own format [CW-AGENT-CONF], each checked
against the agent's published JSON schema by the tests (tests/data/cloudwatch-agent/):
- every node's (`fetch-config`): the boot log, cloud-init's output, slurmd's log and,
  with a hook, the hook's log;
- the controller's (`append-config`, the agent merges it into the first): slurmctld's
  and, with accounting, slurmdbd's log, and the validation reports on /fsx (one shipper
  for the cluster's reports, which every node could read).
Streams are `<node name>/<instance id>/<log>` (model/logs.py); step 25 fills in
@NODE_NAME@ and @INSTANCE_ID@, so every node gets the same bytes. No retention and no
log group creation in the agent's hands: the program declares the group (infra/logs.py)
and the nodes may only write streams into it.
"""

from __future__ import annotations

import json

from model import logs, pins
from userdata import layout

NODE_NAME, INSTANCE_ID = "@NODE_NAME@", "@INSTANCE_ID@"
# The agent's own log on the node (its default path, stated so the docs can name it).
AGENT_LOGFILE = f"{layout.CLOUDWATCH_AGENT_HOME}/logs/amazon-cloudwatch-agent.log"
# Seconds between the agent's uploads of collected lines: the default is 5 [CW-AGENT-CONF];
# stated because a failing node may be terminated soon after its last line.
FORCE_FLUSH_SECONDS = 5


def stream(log: str) -> str:
    return f"{NODE_NAME}/{INSTANCE_ID}/{log}"


def _entry(path: str, group: str, stream_name: str) -> dict:
    # No timestamp_format: the agent stamps each event with the time it read the line
    # (what `ops logs` sorts by); the lines keep their own UTC stamps (lib/common.sh log).
    # A wildcard path follows the newest matching file [CW-AGENT-CONF]: the latest report.
    return {"file_path": path, "log_group_name": group, "log_stream_name": stream_name}


def _document(collect: list[dict], with_agent: bool) -> dict:
    doc: dict = {"logs": {"logs_collected": {"files": {"collect_list": collect}}}}
    if with_agent:
        # root: boot.log, cloud-init-output.log and the Slurm logs are root's (0640/0600).
        doc = {"agent": {"logfile": AGENT_LOGFILE, "run_as_user": "root"}, **doc}
        doc["logs"]["force_flush_interval"] = FORCE_FLUSH_SECONDS
    return doc


def node_config(cfg) -> dict:
    group = logs.log_group_name(cfg.aws_name_base)
    collect = [
        _entry(layout.BOOT_LOG, group, stream("boot")),
        _entry(layout.CLOUD_INIT_OUTPUT_LOG, group, stream("cloud-init")),
        _entry(layout.SLURMD_LOG, group, stream("slurmd")),
    ]
    if cfg.hooks.on_node_ready is not None:
        collect.append(_entry(layout.ON_NODE_READY_LOG, group, stream("on-node-ready")))
    return _document(collect, with_agent=True)


def controller_config(cfg) -> dict:
    group = logs.log_group_name(cfg.aws_name_base)
    collect = [_entry(layout.SLURMCTLD_LOG, group, stream("slurmctld"))]
    if cfg.accounting.enabled:
        collect.append(_entry(layout.SLURMDBD_LOG, group, stream("slurmdbd")))
    # Each run's human summary (nodeside/validation_report.py writes summary.txt per run
    # directory); the machine-readable report.json stays on /fsx.
    reports = f"{layout.validation_results(cfg.name)}*/summary.txt"
    collect.append(_entry(reports, group, logs.VALIDATION_STREAM))
    return _document(collect, with_agent=False)


def _json(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def cloudwatch_files(cfg) -> dict[str, str]:
    """The two configurations; nothing with `logs.enabled: false`."""
    if not cfg.logs.enabled:
        return {}
    return {
        layout.CLOUDWATCH_AGENT_NODE_CONFIG: _json(node_config(cfg)),
        layout.CLOUDWATCH_AGENT_CONTROLLER_CONFIG: _json(controller_config(cfg)),
    }


def logs_env(cfg) -> list[tuple[str, object]]:
    """cluster.env: step 25 (the agent) and the controller's metrics tick (lib/metrics.sh)."""
    if not cfg.logs.enabled:
        return [("LOGS_ENABLED", 0)]
    base = cfg.aws_name_base
    return [
        ("LOGS_ENABLED", 1),
        ("LOG_GROUP", logs.log_group_name(base)),
        ("CLOUDWATCH_AGENT_NODE_CONFIG", layout.CLOUDWATCH_AGENT_NODE_CONFIG),
        ("CLOUDWATCH_AGENT_CONTROLLER_CONFIG", layout.CLOUDWATCH_AGENT_CONTROLLER_CONFIG),
        ("METRICS_NAMESPACE", logs.metrics_namespace(base)),
        ("METRICS_INTERVAL", logs.METRICS_INTERVAL),
        ("CLUSTER_METRICS_PROGRAM", layout.CLUSTER_METRICS_PROGRAM),
    ]


def agent_env() -> list[tuple[str, object]]:
    """cluster.env: what step 20 installs, on every image (a baked image serves any stack)."""
    return [
        ("CLOUDWATCH_AGENT_VERSION", pins.CLOUDWATCH_AGENT_VERSION),
        ("CLOUDWATCH_AGENT_URL", pins.cloudwatch_agent_url()),
        ("CLOUDWATCH_AGENT_KEY_URL", pins.CLOUDWATCH_AGENT_KEY_URL),
        ("CLOUDWATCH_AGENT_KEY_FINGERPRINT", pins.CLOUDWATCH_AGENT_KEY_FINGERPRINT),
        ("CLOUDWATCH_AGENT_CTL", layout.CLOUDWATCH_AGENT_CTL),
    ]
