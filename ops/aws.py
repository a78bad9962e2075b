"""boto3 clients from one replaceable factory, and AWS errors as plain messages.

Tests replace `Session.factory` with one that hands out Stubber-wrapped clients, so
every command runs its real code path against answers checked by botocore's service
models. Throttling is retried by botocore itself (standard retry mode: exponential
backoff with jitter on Throttling/RequestLimitExceeded and 5xx), not by our code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from clitools import exits
from clitools.errors import CliError

# Standard mode retries throttling errors with backoff; 8 attempts in all (the first
# included; `max_attempts` would count retries only) ride out a burst
# of DescribeInstances calls from several operators.
RETRY_CONFIG = Config(retries={"mode": "standard", "total_max_attempts": 8})
# S3 presigned URLs (ops bake) must name the bucket's regional host: botocore's default
# for them is the global `bucket.s3.amazonaws.com`, which answers a bucket outside
# us-east-1 with a redirect, and a SigV4 signature covers the host it was made for.
S3_CONFIG = RETRY_CONFIG.merge(Config(s3={"addressing_style": "virtual"}))


def client_config(service: str) -> Config:
    return S3_CONFIG if service == "s3" else RETRY_CONFIG


ACCESS_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess"}
THROTTLED = {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException"}

# (service, region); region None: the AWS configuration's own (find-blocks without --region).
ClientFactory = Callable[[str, str | None], Any]


def boto3_client(service: str, region: str | None) -> Any:
    return boto3.session.Session().client(service, region_name=region, config=client_config(service))


class Session:
    """Clients for one region, created once each."""

    factory: ClientFactory = staticmethod(boto3_client)

    def __init__(self, region: str | None, factory: ClientFactory | None = None):
        self.region = region
        self._factory = factory or Session.factory
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._factory(service, self.region)
        return self._clients[service]


class OpsError(CliError):
    """A failure to report as one clear line: exit 1 (a check or a step failed) unless
    `code` says otherwise; an AWS call that failed is exit 3 (clitools/exits.py)."""

    def __init__(self, message: str, code: int = exits.FAILED):
        super().__init__(message, code)


def error_code(err: ClientError) -> str:
    code: str = err.response.get("Error", {}).get("Code", "")
    return code


def describe_error(err: Exception, action: str) -> str:
    """`action` failed: why, and what to do, in one line."""
    if isinstance(err, ClientError):
        code = error_code(err)
        msg = err.response.get("Error", {}).get("Message", "")
        op = err.operation_name
        if code in ACCESS_DENIED:
            why = f" ({msg})" if msg else ""
            return f"{action}: access denied to {op}; grant it to your AWS identity{why}"
        if code in THROTTLED:
            return f"{action}: {op} still throttled after retries; wait a minute and run again"
        if code.endswith(".NotFound") or code.endswith("NotFound") or code == "ValidationError":
            return f"{action}: {code}: {msg}"
        return f"{action}: {op} failed: {code}: {msg}"
    if isinstance(err, NoCredentialsError):
        return f"{action}: no AWS credentials; configure a profile or environment credentials"
    if isinstance(err, NoRegionError):
        return f"{action}: no region; set aws:region in the stack file or pass --region"
    if isinstance(err, BotoCoreError):
        return f"{action}: {err}"
    return f"{action}: {err}"


def call(client: Any, operation: str, action: str, **params: Any) -> dict[str, Any]:
    """client.<operation>(**params), raising OpsError with a clear line on failure."""
    try:
        response: dict[str, Any] = getattr(client, operation)(**params)
        return response
    except (ClientError, BotoCoreError) as err:
        raise OpsError(describe_error(err, action), exits.UNREACHABLE) from err
