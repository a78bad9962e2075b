"""IMDSv2 stand-in: one node's instance metadata, on loopback inside its namespace.

Run inside the node's network namespace (`nsenter --net=...`), it answers exactly what
docs/node-contract.md says the boot reads, the way EC2 does for IMDSv2-only instances:
- `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds` (1..21600)
  returns a token; without the header it is 400;
- every `GET` needs a live `X-aws-ec2-metadata-token`, else 401;
- unknown paths are 404; a directory path lists its children, one per line.

The bootstrap reaches it through `AWS_EC2_METADATA_SERVICE_ENDPOINT` (a documented
swap). Stdlib only, so it is cheap enough to run one per node (about 15 MB each).
Every request is appended to a log so tests can check what the boot asked for.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from localcluster import timesync

PORT = 1338
TOKEN_TTL_MAX = 21600


def metadata_tree(identity: dict) -> dict[str, str]:
    """Flat map path -> value of the metadata a node exposes (contract paths only)."""
    base = "/latest/meta-data"
    tree = {
        f"{base}/instance-id": identity["instance_id"],
        f"{base}/local-ipv4": identity["local_ipv4"],
        f"{base}/local-hostname": identity["local_hostname"],
        f"{base}/hostname": identity["local_hostname"],
        f"{base}/placement/availability-zone": identity["availability_zone"],
        f"{base}/placement/region": identity["availability_zone"][:-1],
        f"{base}/instance-type": identity.get("instance_type", "local"),
    }
    for key, value in identity.get("tags", {}).items():
        tree[f"{base}/tags/instance/{key}"] = value
    if identity.get("iam_role"):
        tree.update(role_credentials(base, identity["iam_role"]))
    return tree


# What EC2 serves for an instance profile's role: the SDKs' credential chain reads the
# role name under iam/security-credentials/ and then its temporary keys [IMDS-CREDS].
# The lane's keys are fixed stand-ins; the AWS stand-in (localcluster/aws_standin.py)
# only checks that a request is signed.
LANE_CREDENTIALS = {
    "Code": "Success",
    "LastUpdated": "2026-01-01T00:00:00Z",
    "Type": "AWS-HMAC",
    "AccessKeyId": "ASIALOCALLANE0000000",
    "SecretAccessKey": "local-lane-secret-not-a-real-key",
    "Token": "local-lane-session-token",
    "Expiration": "2099-01-01T00:00:00Z",
}


def role_credentials(base: str, role: str) -> dict[str, str]:
    return {
        f"{base}/iam/info": json.dumps(
            {
                "Code": "Success",
                "LastUpdated": LANE_CREDENTIALS["LastUpdated"],
                "InstanceProfileArn": f"arn:aws:iam::000000000000:instance-profile/{role}",
                "InstanceProfileId": "AIPALOCALLANE0000000",
            }
        ),
        f"{base}/iam/security-credentials/{role}": json.dumps(LANE_CREDENTIALS),
    }


def listing(tree: dict[str, str], path: str) -> str | None:
    """Children of a directory path, EC2 style (sub-directories end in '/')."""
    prefix = path.rstrip("/") + "/"
    children = []
    for key in tree:
        if key.startswith(prefix):
            rest = key[len(prefix) :]
            child = rest.split("/", 1)[0] + ("/" if "/" in rest else "")
            if child not in children:
                children.append(child)
    return "\n".join(sorted(children)) if children else None


class Handler(BaseHTTPRequestHandler):
    server_version = "EC2ws"
    sys_version = ""
    tree: dict[str, str] = {}
    tokens: dict[str, float] = {}
    log_path: str | None = None

    def log_message(self, fmt, *args):  # keep stderr quiet; we keep our own log
        return

    def _record(self, code: int) -> None:
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(f"{time.time():.3f} {self.command} {self.path} {code}\n")

    def _reply(self, code: int, body: str = "", headers: dict | None = None) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self._record(code)

    def do_PUT(self):
        if self.path != "/latest/api/token":
            return self._reply(404, "Not Found")
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        if ttl is None or not ttl.isdigit() or not 1 <= int(ttl) <= TOKEN_TTL_MAX:
            return self._reply(400, "Bad Request")
        token = secrets.token_urlsafe(32)
        self.tokens[token] = time.monotonic() + int(ttl)
        self._reply(200, token, {"X-aws-ec2-metadata-token-ttl-seconds": ttl})

    def do_GET(self):
        token = self.headers.get("X-aws-ec2-metadata-token")
        if not token or self.tokens.get(token, 0) < time.monotonic():
            return self._reply(401, "Unauthorized")
        path = self.path.split("?", 1)[0]
        if path in self.tree:
            return self._reply(200, self.tree[path])
        children = listing(self.tree, path)
        if children is not None:
            return self._reply(200, children)
        self._reply(404, "Not Found")


def serve(identity: dict, host: str, port: int, log_path: str | None, ready_path: str | None) -> None:
    handler = type("NodeHandler", (Handler,), {"tree": metadata_tree(identity), "tokens": {}, "log_path": log_path})
    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer((host, port), handler)
    if ready_path:
        with open(ready_path, "w") as f:
            f.write(f"{host}:{port}\n")
    server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="IMDSv2 stand-in for one local-cluster node")
    p.add_argument("identity", help="JSON file: instance_id, local_ipv4, local_hostname, availability_zone, tags")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=PORT)
    p.add_argument("--log")
    p.add_argument("--ready")
    p.add_argument(
        "--ntp-port", type=int, default=timesync.PORT, help="the clock reference beside metadata, as on EC2 (0: none)"
    )
    a = p.parse_args(argv)
    with open(a.identity) as f:
        identity = json.load(f)
    if a.ntp_port:
        timesync.serve(a.host, a.ntp_port)
    serve(identity, a.host, a.port, a.log, a.ready)
    return 0


if __name__ == "__main__":
    sys.exit(main())
