"""Connection handling: pipelined requests answered in order, thousands of
concurrent connections, and idle connections closed after
connections.max.idle.ms."""
import socket
import struct
import time

import wire


def test_pipelined_requests_are_answered_in_order(server):
    with wire.connect(server) as s:
        # Twenty ApiVersions v0 requests sent back to back before reading.
        s.sendall(b"".join(wire.frame(wire.header(18, 0, cid)) for cid in range(100, 120)))
        got = [struct.unpack_from(">i", wire.recv_frame(s), 0)[0] for _ in range(20)]
    assert got == list(range(100, 120))


def test_thousands_of_concurrent_connections(server):
    socks = []
    try:
        for _ in range(2000):
            socks.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        for i, s in enumerate(socks):
            s.sendall(wire.frame(wire.header(18, 0, i)))
        for i, s in enumerate(socks):
            s.settimeout(10)
            (cid,) = struct.unpack_from(">i", wire.recv_frame(s), 0)
            assert cid == i
    finally:
        for s in socks:
            s.close()
    # The server still serves new clients.
    with wire.connect(server) as s:
        error, apis = wire.api_versions_v0(s)
        assert error == 0 and 18 in apis


def test_idle_connections_are_closed(server_factory):
    srv = server_factory("--override", "connections.max.idle.ms=300", name="idle")
    with wire.connect(srv) as s:
        assert wire.api_versions_v0(s)[0] == 0
        start = time.time()
        assert wire.closed_by_peer(s, timeout=5)
        assert time.time() - start < 4
    # An active connection is not closed while it keeps talking.
    with wire.connect(srv) as s:
        for _ in range(6):
            time.sleep(0.1)
            assert wire.api_versions_v0(s)[0] == 0
