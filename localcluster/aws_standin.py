"""A local AWS endpoint for the lanes: EC2 and Auto Scaling over the query protocol.

The controller's agents call AWS with boto3 (nodeside/aws_client.py). In the local lanes
they reach this stand-in instead, through the documented endpoint swap
(`AWS_ENDPOINT_URL_EC2`, `AWS_ENDPOINT_URL_AUTO_SCALING` in overrides.env) [SDK-ENDPOINT-ENV], with
credentials from the instance-metadata stand-in as on EC2. It answers only what a lane
registers a handler for, and it holds every request to AWS's own contract, read from
botocore's service models (the oracle the unit tests' Stubber uses too):
- the action must exist in the service's model, and a handler must be registered for it;
- every parameter is decoded by the model's input shape, the way botocore's query and
  EC2 serializers encode it (`Name.member.N`, `Name.N`, `Name.entry.N.key`): a parameter
  the shape does not have, a missing required member, a value of the wrong type or
  outside the shape's enum or range is refused with AWS's error code for it, and
  recorded as refused (`refused()`: lane tests assert there is none);
- the answer is the handler's dict serialized as the operation's output shape in the
  protocol's XML, so botocore's own parser reads it on the node.
Handlers are plain functions `(params) -> dict`, keyed by (service, action), where params
is the decoded request (member names as in boto3); they raise StandinError for AWS's
refusals (`Throttling`, `ValidationError`, ...). Every request is appended to
`requests.jsonl` in the state directory.

Run it in the namespace of the node that calls AWS (like localcluster/imds.py):
`python -m localcluster.aws_standin --state DIR --handlers MODULE:FACTORY`, where
FACTORY(state_dir) returns the handler table.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import importlib
import json
import sys
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import botocore.session

SERVICES = ("ec2", "autoscaling")
Handler = Callable[[dict], dict]
Handlers = dict[tuple[str, str], Handler]


class StandinError(Exception):
    """AWS's refusal of a request: an error code, its message and the HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status


_MODELS: dict[str, Any] = {}


def service_model(service: str) -> Any:
    if service not in _MODELS:
        _MODELS[service] = botocore.session.get_session().get_service_model(service)
    return _MODELS[service]


def service_for_version(version: str) -> str:
    for name in SERVICES:
        if service_model(name).api_version == version:
            return name
    raise StandinError("InvalidAction", f"no service of this stand-in has API version {version!r}")


# --- request: decode the form by the input shape, as botocore's serializers encode it ---


class _Form:
    def __init__(self, fields: dict[str, str], protocol: str):
        self.fields, self.protocol, self.used = fields, protocol, set()

    def take(self, key: str) -> str | None:
        if key in self.fields:
            self.used.add(key)
            return self.fields[key]
        return None

    def has_prefix(self, prefix: str) -> bool:
        return any(k == prefix or k.startswith(prefix + ".") for k in self.fields)

    def indices(self, prefix: str) -> list[int]:
        out = set()
        for k in self.fields:
            if k.startswith(prefix + "."):
                head = k[len(prefix) + 1 :].split(".", 1)[0]
                if head.isdigit():
                    out.add(int(head))
        return sorted(out)


def _member_name(shape: Any, default: str, protocol: str) -> str:
    ser = shape.serialization
    if protocol == "ec2":
        if "queryName" in ser:
            return ser["queryName"]
        if "name" in ser:
            return ser["name"][0].upper() + ser["name"][1:]
        return default
    return ser.get("name", default)


def _decode(shape: Any, prefix: str, form: _Form, path: str) -> Any:
    kind = shape.type_name
    if kind == "structure":
        return _decode_structure(shape, prefix, form, path)
    if kind == "list":
        return _decode_list(shape, prefix, form, path)
    if kind == "map":
        return _decode_map(shape, prefix, form, path)
    raw = form.take(prefix)
    return None if raw is None else _scalar(shape, raw, path)


def _decode_structure(shape: Any, prefix: str, form: _Form, path: str) -> dict | None:
    out = {}
    for name, member in shape.members.items():
        key = _member_name(member, name, form.protocol)
        full = f"{prefix}.{key}" if prefix else key
        if form.has_prefix(full):
            value = _decode(member, full, form, f"{path}.{name}" if path else name)
            if value is not None:
                out[name] = value
    missing = [m for m in shape.required_members if m not in out]
    if missing:
        where = f" in {path}" if path else ""
        raise StandinError("MissingParameter", f"the request must contain the parameter {missing[0]}{where}")
    return out if (out or not prefix) else None


def _decode_list(shape: Any, prefix: str, form: _Form, path: str) -> list:
    if form.protocol == "ec2" or shape.serialization.get("flattened"):
        base = prefix
    else:
        base = f"{prefix}.{shape.member.serialization.get('name', 'member')}"
    if form.take(prefix) == "":  # the query protocol's empty list
        return []
    return [_decode(shape.member, f"{base}.{i}", form, f"{path}[{i}]") for i in form.indices(base)]


def _decode_map(shape: Any, prefix: str, form: _Form, path: str) -> dict:
    base = prefix if shape.serialization.get("flattened") else f"{prefix}.entry"
    kname = shape.key.serialization.get("name", "key")
    vname = shape.value.serialization.get("name", "value")
    return {
        _decode(shape.key, f"{base}.{i}.{kname}", form, path): _decode(
            shape.value, f"{base}.{i}.{vname}", form, f"{path}[{i}]"
        )
        for i in form.indices(base)
    }


def _scalar(shape: Any, raw: str, path: str) -> Any:
    kind = shape.type_name
    try:
        if kind in ("integer", "long"):
            value: Any = int(raw)
        elif kind in ("float", "double"):
            value = float(raw)
        elif kind == "boolean":
            if raw not in ("true", "false"):
                raise ValueError(raw)
            value = raw == "true"
        elif kind == "timestamp":
            value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        elif kind == "blob":
            value = base64.b64decode(raw, validate=True)
        else:
            value = raw
    except ValueError:
        raise StandinError("InvalidParameterValue", f"value {raw!r} for {path} is not a valid {kind}") from None
    enum = getattr(shape, "enum", None)
    if enum and value not in enum:
        raise StandinError("InvalidParameterValue", f"value {raw!r} for {path} is not one of {', '.join(enum)}")
    meta = shape.metadata
    if kind in ("integer", "long") and ("min" in meta and value < meta["min"] or "max" in meta and value > meta["max"]):
        raise StandinError(
            "InvalidParameterValue", f"value {value} for {path} is outside {meta.get('min')}..{meta.get('max')}"
        )
    return value


def decode_request(service: str, fields: dict[str, str]) -> tuple[str, dict]:
    """(action, params) of a query-protocol form, checked against the service's model."""
    model = service_model(service)
    action = fields.get("Action", "")
    if action not in model.operation_names:
        raise StandinError("InvalidAction", f"the action {action!r} is not valid for this web service")
    op = model.operation_model(action)
    form = _Form({k: v for k, v in fields.items() if k not in ("Action", "Version")}, model.protocol)
    params = _decode(op.input_shape, "", form, "") if op.input_shape is not None else {}
    unknown = sorted(set(form.fields) - form.used)
    if unknown:
        code = "UnknownParameter" if model.protocol == "ec2" else "ValidationError"
        raise StandinError(code, f"the parameter {unknown[0]} is not recognized for {action}")
    return action, params or {}


# --- response: the handler's dict as the output shape's XML --------------------------


def _xml_value(shape: Any, value: Any, name: str) -> str:
    kind = shape.type_name
    if kind == "structure":
        inner = "".join(
            _xml_value(m, value[k], m.serialization.get("name", k)) for k, m in shape.members.items() if k in value
        )
        unknown = sorted(set(value) - set(shape.members))
        if unknown:
            raise TypeError(f"handler answered {unknown[0]!r}, not a member of {shape.name}")
        return f"<{name}>{inner}</{name}>"
    if kind == "list":
        item = shape.member.serialization.get("name", "member")
        if shape.serialization.get("flattened"):
            return "".join(_xml_value(shape.member, v, name) for v in value)
        return f"<{name}>" + "".join(_xml_value(shape.member, v, item) for v in value) + f"</{name}>"
    if kind == "map":
        k, v = shape.key.serialization.get("name", "key"), shape.value.serialization.get("name", "value")
        entries = "".join(
            f"<entry>{_xml_value(shape.key, a, k)}{_xml_value(shape.value, b, v)}</entry>" for a, b in value.items()
        )
        return f"<{name}>{entries}</{name}>"
    if kind == "boolean":
        text = "true" if value else "false"
    elif kind == "timestamp":
        text = (
            value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            if isinstance(value, dt.datetime)
            else str(value)
        )
    elif kind == "blob":
        text = base64.b64encode(value).decode()
    else:
        text = str(value)
    return f"<{name}>{escape(text)}</{name}>"


def _members_xml(shape: Any, value: dict) -> str:
    if shape is None:
        return ""
    return _xml_value(shape, value, "x")[3:-4]  # the structure's members without a wrapper


def encode_response(service: str, action: str, value: dict, request_id: str) -> str:
    model = service_model(service)
    op = model.operation_model(action)
    xmlns = (
        model.metadata.get("xmlNamespace") or f"http://{model.endpoint_prefix}.amazonaws.com/doc/{model.api_version}/"
    )
    body = _members_xml(op.output_shape, value)
    if model.protocol == "ec2":
        return f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{xmlns}"><requestId>{request_id}</requestId>{body}</{action}Response>'
    wrapper = op.output_shape.serialization.get("resultWrapper") if op.output_shape is not None else None
    result = f"<{wrapper}>{body}</{wrapper}>" if wrapper else ""
    meta = f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{xmlns}">{result}{meta}</{action}Response>'
    )


def encode_error(service: str, err: StandinError, request_id: str) -> str:
    code, msg = escape(err.code), escape(err.message)
    if service == "ec2":
        return f"<Response><Errors><Error><Code>{code}</Code><Message>{msg}</Message></Error></Errors><RequestID>{request_id}</RequestID></Response>"
    kind = "Receiver" if err.status >= 500 else "Sender"
    return f"<ErrorResponse><Error><Type>{kind}</Type><Code>{code}</Code><Message>{msg}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"


# --- the server ----------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


class AwsStandin:
    """The endpoint; `start()` serves in a thread (tests), `serve_forever()` in the foreground."""

    def __init__(self, handlers: Handlers, state: Path, host: str = "127.0.0.1", port: int = 0):
        self.handlers, self.state = handlers, Path(state)
        self.state.mkdir(parents=True, exist_ok=True)
        self.log = self.state / "requests.jsonl"
        self._lock = threading.Lock()
        standin = self

        class _Http(BaseHTTPRequestHandler):
            server_version = "AmazonWebServices"
            sys_version = ""

            def log_message(self, fmt, *args):
                return

            def do_POST(self):  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode()
                status, text = standin.answer(body, signed="Authorization" in self.headers)
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer((host, port), _Http)
        self.url = f"http://{host}:{self.server.server_address[1]}"

    def answer(self, body: str, signed: bool = True) -> tuple[int, str]:
        """(HTTP status, XML) for one request; every request is recorded."""
        fields = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
        rid = str(uuid.uuid4())
        record: dict[str, Any] = {"action": fields.get("Action", "?")}
        service = "autoscaling"  # the error format when the service cannot be told
        try:
            try:
                service = service_for_version(fields.get("Version", ""))
                record["service"] = service
                action, params = decode_request(service, fields)
                record["params"] = _jsonable(params)
                if not signed:
                    raise StandinError("MissingAuthenticationToken", "the request is not signed (no credentials?)", 403)
                handler = self.handlers.get((service, action))
                if handler is None:
                    raise StandinError("InvalidAction", f"this stand-in has no handler for {service}:{action}")
            except StandinError:
                record["refused"] = True  # AWS's model (or the lane) would not take this request
                raise
            try:
                text = encode_response(service, action, handler(params), rid)
            except (TypeError, KeyError, AttributeError) as err:  # the handler broke the output shape
                record["refused"] = True
                raise StandinError(
                    "InternalFailure", f"handler answer does not fit {action}'s output: {err}", 500
                ) from None
            record["status"] = 200
            return 200, text
        except StandinError as err:
            record.update(status=err.status, error=err.code, message=err.message)
            return err.status, encode_error(service, err, rid)
        finally:
            with self._lock, open(self.log, "a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")

    def requests(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def refused(self) -> list[dict]:
        """Requests AWS's model would not accept (or no handler exists for)."""
        return [r for r in self.requests() if r.get("refused")]

    def start(self) -> AwsStandin:
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def load_handlers(spec: str, state: Path) -> Handlers:
    module, _, factory = spec.partition(":")
    return getattr(importlib.import_module(module), factory)(state)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localcluster.aws_standin", description=__doc__.split("\n")[0])
    p.add_argument("--state", required=True, type=Path, help="directory for requests.jsonl and the handlers' state")
    p.add_argument("--handlers", required=True, help="MODULE:FACTORY returning {(service, action): handler}")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ready", type=Path, help="write the URL here once listening")
    a = p.parse_args(argv)
    standin = AwsStandin(load_handlers(a.handlers, a.state), a.state, a.host, a.port)
    if a.ready:
        a.ready.write_text(standin.url + "\n")
    standin.server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
