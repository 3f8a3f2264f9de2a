"""Raw Kafka wire helpers for the compatibility tests: size-prefixed frames,
request headers, and the ApiVersions request and its v0-layout answer."""
import socket
import struct


def connect(server, timeout=5):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    s.settimeout(timeout)
    return s


def header(api_key, version, correlation_id, client_id="sluice-compat", flexible=False):
    cid = client_id.encode()
    h = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid
    return h + (b"\x00" if flexible else b"")  # empty tagged fields


def frame(payload):
    return struct.pack(">i", len(payload)) + payload


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def recv_frame(s):
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    return recv_exact(s, size)


def closed_by_peer(s, timeout=5):
    """True when the server closes the connection (EOF or reset) within
    `timeout` without sending anything; raises if it sends bytes."""
    s.settimeout(timeout)
    try:
        data = s.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    if data:
        raise AssertionError(f"expected the connection to close, got {data[:64]!r}")
    return True


def api_versions_v0(s, correlation_id=1, version=0):
    """Sends ApiVersions at `version` with an empty body (v0-v2 layout) and
    reads the answer in the v0 layout: (error_code, {key: (min, max)})."""
    s.sendall(frame(header(18, version, correlation_id)))
    body = recv_frame(s)
    (cid,) = struct.unpack_from(">i", body, 0)
    assert cid == correlation_id, (cid, correlation_id)
    error, n = struct.unpack_from(">hi", body, 4)
    apis = {}
    for i in range(n):
        key, lo, hi = struct.unpack_from(">hhh", body, 10 + 6 * i)
        apis[key] = (lo, hi)
    return error, apis


def api_versions_v3(s, correlation_id=2):
    """ApiVersions v3 (flexible): returns the error code."""
    body = b"\x0esluice-compat\x021\x00"  # compact strings, empty tags
    s.sendall(frame(header(18, 3, correlation_id, flexible=True) + body))
    resp = recv_frame(s)
    (cid, error) = struct.unpack_from(">ih", resp, 0)
    assert cid == correlation_id
    return error


def advertised(server):
    """The broker's advertised API ranges, {key: (min, max)}."""
    with connect(server) as s:
        error, apis = api_versions_v0(s)
    assert error == 0
    return apis
