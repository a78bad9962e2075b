"""The lane's clock reference: an SNTP server answering with this host's clock.

On EC2 a node's clock reference is the Amazon Time Sync Service at the link-local address
169.254.169.123, beside instance metadata. Lane nodes share this host's kernel clock, so
the true reference for them is that clock itself: this server answers each SNTP request
[SNTP] with it, as chrony's `local stratum 10` serves an isolated network's own clock
(stratum 10, reference id LOCL, no leap warning). The metadata stand-in runs it inside each
node's namespace (localcluster/imds.py), and the lane's health program measures the node's
clock against it (health.clock_reference), so the clock check runs for real on the lane
and a node whose clock drifted from the reference would fail it.

`skew` (seconds) makes the server answer that far ahead of the host: a test's fault.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

PORT = 1123  # UDP, inside each node's namespace (123 would need privileges in a test)
NTP_EPOCH = 2208988800
STRATUM = 10
REFID = b"LOCL"


def _stamp(t: float) -> bytes:
    return struct.pack("!II", int(t) + NTP_EPOCH, int((t % 1) * 2**32))


def answer(request: bytes, received: float, skew: float = 0.0) -> bytes | None:
    """The server's reply to one client packet (None for anything that is not a client request)."""
    if len(request) < 48 or request[0] & 7 != 3:
        return None
    version = (request[0] >> 3) & 7
    out = bytearray(48)
    out[0] = (0 << 6) | (version << 3) | 4  # no leap warning, the client's version, server
    out[1], out[2], out[3] = STRATUM, request[2], 0xEC  # poll echoed; precision about 2**-20 s
    out[12:16] = REFID
    now = time.time() + skew
    out[16:24] = _stamp(now)  # reference time: the clock is its own reference
    out[24:32] = request[40:48]  # origin: the client's transmit time
    out[32:40] = _stamp(received + skew)
    out[40:48] = _stamp(time.time() + skew)
    return bytes(out)


def serve(host: str = "127.0.0.1", port: int = PORT, skew: float = 0.0) -> socket.socket:
    """Answer SNTP on host:port in a daemon thread; returns the bound socket."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))

    def loop() -> None:
        while True:
            try:
                data, peer = sock.recvfrom(512)
            except OSError:
                return  # closed
            reply = answer(data, time.time(), skew)
            if reply is not None:
                sock.sendto(reply, peer)

    threading.Thread(target=loop, daemon=True).start()
    return sock
