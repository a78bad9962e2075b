"""AWS calls from the controller's agents (repair, topology): one way to make them.

Shipped verbatim to every node (/opt/gpu-cluster/lib/aws_client.py) and run with the
interpreter of the node's own boto3 virtualenv (GPU_CLUSTER_AWS_PYTHON, installed by step
20 from the hash-pinned versions the tests' Stubber checks against): the OS's boto3
(Debian 12 ships 1.26, which has no DescribeInstanceTopology) never decides which AWS
APIs exist.

- `client(service)`: a boto3 client in the node's region, standard retry mode (throttling
  and transient errors retried with backoff, a bounded number of attempts), bounded
  connect/read timeouts, and the endpoint from AWS_ENDPOINT_URL_<SERVICE_ID> /
  AWS_ENDPOINT_URL when set (the local lanes' stand-in) [SDK-ENDPOINT-ENV].
- `call(client, "Operation", **params)`: the response, or AwsCallError with one line
  that names the action and, for a refusal, the IAM action the role lacks.
- `pages(client, "Operation", "ResultKey", **params)`: every item of a paginated result.

Credentials come from the instance profile through instance metadata, as for every
other AWS call on a node; nothing here reads a key.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from typing import Any


# Retries for throttling and transient faults: botocore's "standard" mode retries
# Throttling/RequestLimitExceeded and 5xx with exponential backoff and jitter [BOTO-RETRY].
def max_attempts() -> int:
    return int(os.environ.get("GPU_CLUSTER_AWS_MAX_ATTEMPTS", "5"))


CONNECT_TIMEOUT = 10
READ_TIMEOUT = 30

# Error codes that mean the role may not make the call, or the request was refused for
# rate; the rest are the API's own refusals (not found, invalid state).
DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess", "AuthFailure"}
)
THROTTLED_CODES = frozenset(
    {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException", "RequestThrottled"}
)
# Where the node's region comes from when the environment does not say (IMDSv2).
IMDS_DEFAULT = "http://169.254.169.254"


class AwsCallError(Exception):
    """One failed AWS call, printable as one line."""

    def __init__(self, action: str, code: str, message: str):
        self.action = action
        self.code = code
        self.message = " ".join(str(message).split())
        self.denied = code in DENIED_CODES
        self.throttled = code in THROTTLED_CODES
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.denied:
            return f"{self.action}: access denied ({self.code}): the instance role lacks {self.action}: {self.message}"
        if self.throttled:
            return f"{self.action}: throttled ({self.code}) after {max_attempts()} attempts: {self.message}"
        return f"{self.action}: {self.code}: {self.message}"


# Services whose IAM prefix is neither their signing name nor their endpoint prefix:
# CloudWatch signs and is reached as `monitoring`, its actions are `cloudwatch:*`.
IAM_PREFIX = {"CloudWatch": "cloudwatch"}


def iam_action(client: Any, operation: str) -> str:
    """`autoscaling:TerminateInstanceInAutoScalingGroup` for a client and an operation."""
    model = client.meta.service_model
    prefix = IAM_PREFIX.get(model.service_id) or model.metadata.get("signingName") or model.endpoint_prefix
    return f"{prefix}:{operation}"


def endpoint_for(service_id: str, environ: dict[str, str] | None = None) -> str | None:
    """The endpoint override for a service, by AWS's shared-config rule: the service id
    in upper case with spaces as underscores (`Auto Scaling` -> AWS_ENDPOINT_URL_AUTO_SCALING),
    then AWS_ENDPOINT_URL [SDK-ENDPOINT-ENV]. Read here so the rule holds whatever boto3."""
    env = os.environ if environ is None else environ
    key = "AWS_ENDPOINT_URL_" + service_id.upper().replace(" ", "_").replace("-", "_")
    return env.get(key) or env.get("AWS_ENDPOINT_URL") or None


def imds_region(base: str | None = None, timeout: float = 2.0) -> str:
    """The instance's region from IMDSv2 (placement/region)."""
    base = (base or os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or IMDS_DEFAULT).rstrip("/")
    put = urllib.request.Request(
        f"{base}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )
    with urllib.request.urlopen(put, timeout=timeout) as r:
        token = r.read().decode()
    get = urllib.request.Request(
        f"{base}/latest/meta-data/placement/region", headers={"X-aws-ec2-metadata-token": token}
    )
    with urllib.request.urlopen(get, timeout=timeout) as r:
        return r.read().decode().strip()


def node_region() -> str:
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(key):
            return os.environ[key]
    return imds_region()


def client(service: str, region: str | None = None, session: Any = None) -> Any:
    """A boto3 client for `service` (`ec2`, `autoscaling`, ...) in this node's region."""
    import boto3  # the node's own venv; imported here so the module loads without it
    from botocore.config import Config

    session = session or boto3.session.Session()
    cfg = Config(
        retries={"mode": "standard", "total_max_attempts": max_attempts()},
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
    )
    region = region or node_region()
    made = session.client(service, region_name=region, config=cfg)
    url = endpoint_for(made.meta.service_model.service_id)
    return session.client(service, region_name=region, config=cfg, endpoint_url=url) if url else made


def _error(client: Any, operation: str, err: Exception) -> AwsCallError:
    from botocore.exceptions import BotoCoreError, ClientError

    action = iam_action(client, operation)
    if isinstance(err, ClientError):
        e = err.response.get("Error", {})
        return AwsCallError(action, e.get("Code", "Unknown"), e.get("Message", str(err)))
    if isinstance(err, BotoCoreError):
        return AwsCallError(action, type(err).__name__, str(err))
    raise err


def call(client: Any, operation: str, **params: Any) -> dict:
    """client.<operation>(**params); AwsCallError (one line) when AWS refuses or cannot be reached."""
    from botocore.exceptions import BotoCoreError, ClientError

    method = getattr(client, _snake(client, operation))
    try:
        return method(**params)
    except (ClientError, BotoCoreError) as err:
        raise _error(client, operation, err) from None


def pages(client: Any, operation: str, result_key: str, **params: Any) -> Iterator[Any]:
    """Every item under `result_key` across all pages of a paginated operation."""
    from botocore.exceptions import BotoCoreError, ClientError

    paginator = client.get_paginator(_snake(client, operation))
    try:
        for page in paginator.paginate(**params):
            yield from page.get(result_key, [])
    except (ClientError, BotoCoreError) as err:
        raise _error(client, operation, err) from None


def _snake(client: Any, operation: str) -> str:
    """The client method name of an API operation (`DescribeInstanceTopology` ->
    `describe_instance_topology`), from the client's own table."""
    for method, api in client.meta.method_to_api_mapping.items():
        if api == operation:
            return method
    raise AwsCallError(iam_action(client, operation), "UnknownOperation", "not in this botocore's service model")
