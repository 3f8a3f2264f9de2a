"""Hostile clients are bounded (design 007, issue #9 part 6).

Each case sends its bad input with a raw socket or a real client (kafka-python,
confluent-kafka), checks the Kafka error code or the close, checks that a
well-behaved producer is still served, restarts the broker and checks that
every record it acknowledged is still there. The last case is start-up
recovery: a flushed segment corrupted on disk truncates only itself.
"""
import gc
import struct
import time
from io import BytesIO

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import PolicyViolationError
from kafka.protocol.fetch import FetchRequest, FetchResponse

import wire

MIB = 1 << 20
NOT_LEADER_OR_FOLLOWER = 6
POLICY_VIOLATION = 44
UNKNOWN_LEADER_EPOCH = 75
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."


def status_kib(srv, key):
    """A `/proc/<pid>/status` figure of the server, in KiB."""
    for line in open(f"/proc/{srv.proc.pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key}")


def log_text(srv):
    return srv.log_path.read_text(errors="replace")


class Witness:
    """A well-behaved producer (acks=all) and every value the broker
    acknowledged to it."""

    def __init__(self, srv, topic="witness"):
        self.srv = srv
        self.topic = topic
        self.acked = []
        self.send(5)

    def send(self, n):
        got = []
        p = Producer({"bootstrap.servers": self.srv.bootstrap, "acks": "all",
                      "linger.ms": 0, "message.timeout.ms": 30000})
        for i in range(n):
            value = f"value-{len(self.acked) + i}".encode()
            p.produce(self.topic, value, partition=0,
                      on_delivery=lambda err, msg: got.append((err, msg.value())))
        assert p.flush(30) == 0
        del p  # closes its connections
        assert [e for e, _ in got] == [None] * n, got
        self.acked += [v for _, v in got]

    def read_all(self):
        c = Consumer({"bootstrap.servers": self.srv.bootstrap, "group.id": "witness-reader",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(self.topic, 0, 0)])
        values = []
        deadline = time.time() + 30
        while len(values) < len(self.acked) and time.time() < deadline:
            m = c.poll(1)
            if m is not None and m.error() is None:
                values.append(m.value())
        c.close()
        return values

    def still_served(self):
        assert self.srv.proc.poll() is None, self.srv.log()
        with wire.connect(self.srv) as s:
            assert wire.api_versions_v0(s)[0] == 0
        self.send(3)
        assert self.read_all() == self.acked

    def survives_restart(self):
        """Still served; then a restart loses nothing acknowledged."""
        self.still_served()
        assert self.srv.restart() == 0, self.srv.log()
        assert self.read_all() == self.acked
        self.send(2)
        assert self.read_all() == self.acked
        assert "panicked" not in log_text(self.srv)


# ------------------------------------------------------------ request bytes

def test_slow_loris_frames_hold_no_memory_and_are_closed(server_factory):
    """50 connections announce 100 MiB frames and send 100 bytes of them:
    the server holds what arrived, not what was announced (RSS and address
    space stay flat: no 5 GiB reserved), keeps serving, and closes each one
    when its body has not arrived within connections.max.idle.ms."""
    srv = server_factory("--override", "connections.max.idle.ms=4000", name="loris")
    w = Witness(srv)
    rss0, size0 = status_kib(srv, "VmRSS"), status_kib(srv, "VmSize")
    socks = []
    for _ in range(50):
        s = wire.connect(srv, timeout=10)
        s.sendall(struct.pack(">i", 100 * MIB) + b"\x00\x03" + b"x" * 98)
        socks.append(s)
    time.sleep(0.5)
    rss, size = status_kib(srv, "VmRSS"), status_kib(srv, "VmSize")
    assert rss - rss0 < 20 * 1024, (rss0, rss)
    assert size - size0 < 512 * 1024, (size0, size)
    w.still_served()
    for s in socks:
        assert wire.closed_by_peer(s, timeout=15)
        s.close()
    assert log_text(srv).count(
        "request body did not arrive within connections.max.idle.ms; closing connection") >= 50
    w.survives_restart()


def test_frames_claiming_billions_of_elements(server_factory):
    """Array counts of 2^31 - 1 elements in small frames (top level and
    nested, old and flexible versions) close the connection at decode, with
    no reservation behind them."""
    srv = server_factory(name="claims")
    w = Witness(srv)

    def header(key, version, flexible):
        h = struct.pack(">hhih", key, version, 7, 1) + b"c"
        return h + (b"\x00" if flexible else b"")

    i32_max = struct.pack(">i", 2**31 - 1)
    compact = bytes([0x80, 0x80, 0x80, 0x80, 0x08])  # a compact array of 2^31 - 1
    pad = b"\x00" * 64
    frames = {
        "CreateTopics v4 topics": header(19, 4, False) + i32_max + pad,
        "CreateTopics v5 topics": header(19, 5, True) + compact + pad,
        "CreateTopics v4 assignments": header(19, 4, False)
        + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">ih", 1, 1) + i32_max + pad,
        "Metadata v12 topics": header(3, 12, True) + compact + pad,
        "Produce v3 topic_data": header(0, 3, False) + struct.pack(">hhi", -1, 1, 10000)
        + i32_max + pad,
        "Fetch v4 topics": header(1, 4, False) + struct.pack(">iiiib", -1, 0, 0, 0, 0)
        + i32_max + pad,
        "OffsetCommit v8 topics": header(8, 8, True) + b"\x02g" + struct.pack(">i", -1)
        + b"\x01\x01" + compact + pad,
    }
    peak0 = status_kib(srv, "VmPeak")
    for what, body in frames.items():
        with wire.connect(srv) as s:
            s.sendall(wire.frame(body))
            assert wire.closed_by_peer(s), what
    assert status_kib(srv, "VmPeak") - peak0 < 256 * 1024
    assert "elements but only" in log_text(srv)
    w.survives_restart()


def ram_and_swap_bytes():
    kib = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        kib[k] = int(v.split()[0])
    return (kib["MemTotal"] + kib.get("SwapTotal", 0)) * 1024


def test_claim_within_the_frame_larger_than_ram_does_not_abort(server_factory):
    """A count the decoder accepts (no more elements than bytes left) still
    makes it reserve count x element size at once: ~120 bytes per
    LeaveGroup member. A frame sized so that reservation exceeds RAM + swap
    made the kernel refuse it and Rust abort the broker; the server's
    allocator maps such blocks without reserving, so the request only
    closes its connection."""
    frame_size = ram_and_swap_bytes() // 100 + MIB
    if frame_size > 600 * MIB:
        pytest.skip(f"needs a {frame_size >> 20} MiB frame on this machine")
    limit = frame_size + MIB
    srv = server_factory("--override", f"socket.request.max.bytes={limit}",
                         "--override", f"queued.max.request.bytes={max(limit, 512 * MIB)}",
                         name="reserve")
    w = Witness(srv)
    # LeaveGroup v3: group_id "g", members[] claiming every byte left; the
    # bytes are 0xff, so the first member's id (length -1) fails to decode.
    head = struct.pack(">hhih", 13, 3, 7, 1) + b"c" + struct.pack(">h", 1) + b"g"
    claim = frame_size - len(head) - 4
    assert claim * 120 > ram_and_swap_bytes()
    with wire.connect(srv, timeout=60) as s:
        s.sendall(struct.pack(">i", frame_size) + head + struct.pack(">i", claim))
        chunk = b"\xff" * MIB
        left = claim
        while left:
            n = min(left, len(chunk))
            s.sendall(chunk[:n])
            left -= n
        assert wire.closed_by_peer(s, timeout=60)
    assert srv.proc.poll() is None, srv.log()
    assert "LeaveGroup v3 body" in log_text(srv)
    w.survives_restart()


# -------------------------------------------------------------- connections

def test_connection_flood_past_max_connections_per_ip(server_factory):
    """max.connections.per.ip (here 2, overridden to 20 for 127.0.0.1): the
    21st connection from the address is accepted and closed at once with
    Kafka's log line; the others keep working, and a closed one frees its
    place."""
    srv = server_factory("--override", "max.connections.per.ip=2",
                         "--override", "max.connections.per.ip.overrides=127.0.0.1:20",
                         name="flood")
    w = Witness(srv)
    time.sleep(0.5)  # the witness's connections are gone
    held, refused = [], 0
    for i in range(60):
        s = wire.connect(srv)
        try:
            assert wire.api_versions_v0(s, correlation_id=i)[0] == 0
            held.append(s)
        except (EOFError, ConnectionResetError, BrokenPipeError):
            refused += 1
            s.close()
    assert (len(held), refused) == (20, 40)
    assert "Rejected connection from 127.0.0.1, address already has the configured " \
        "maximum of 20 connections." in log_text(srv)
    for i, s in enumerate(held):
        assert wire.api_versions_v0(s, correlation_id=100 + i)[0] == 0
    held.pop().close()
    time.sleep(0.3)
    with wire.connect(srv) as s:
        assert wire.api_versions_v0(s)[0] == 0
    for s in held:
        s.close()
    time.sleep(0.3)
    w.survives_restart()


def test_max_connections_makes_new_connections_wait(server_factory):
    """max.connections: past the limit the broker stops accepting (the new
    connection waits in the listen queue, not closed) until one closes."""
    srv = server_factory("--override", "max.connections=5", name="maxconn")
    w = Witness(srv)
    time.sleep(0.5)
    held = [wire.connect(srv) for _ in range(5)]
    for i, s in enumerate(held):
        assert wire.api_versions_v0(s, correlation_id=i)[0] == 0
    waiting = wire.connect(srv)
    waiting.sendall(wire.frame(wire.header(18, 0, 77)))
    assert not wire.closed_by_peer(waiting, timeout=1)  # neither answered nor closed
    assert "max.connections reached" in log_text(srv)
    held.pop().close()
    waiting.settimeout(10)
    (cid,) = struct.unpack_from(">i", wire.recv_frame(waiting))
    assert cid == 77
    waiting.close()
    for s in held:
        s.close()
    time.sleep(0.3)
    w.survives_restart()


# ------------------------------------------------------ counts in requests

def test_create_topics_over_10000_partitions(server_factory):
    """CreateTopics asking for more than 10,000 partitions, or whose topics
    would take more than 10,000 metadata records, is refused whole with
    POLICY_VIOLATION (KRaft's limits), validate_only included, and creates
    nothing; through librdkafka (v4+) and kafka-python."""
    srv = server_factory(name="topics")
    w = Witness(srv)
    a = AdminClient({"bootstrap.servers": srv.bootstrap})
    cases = [
        ([NewTopic("huge", 10001, 1)], TOO_MANY_PARTITIONS),
        ([NewTopic("half-a", 5000, 1), NewTopic("half-b", 5001, 1)], TOO_MANY_PARTITIONS),
        ([NewTopic("even-a", 5000, 1), NewTopic("even-b", 5000, 1)], TOO_MANY_RECORDS),
    ]
    for topics, message in cases:
        for validate_only in (False, True):
            fs = a.create_topics(topics, validate_only=validate_only, request_timeout=30)
            for name, f in fs.items():
                with pytest.raises(KafkaException) as e:
                    f.result(30)
                err = e.value.args[0]
                assert (err.code(), err.str()) == (POLICY_VIOLATION, message), name
    kp = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=30000)
    try:
        for validate_only in (False, True):
            with pytest.raises(PolicyViolationError):
                kp.create_topics([KpNewTopic("huge", 10001, 1)], validate_only=validate_only)
        # The largest that fits, validated only.
        kp.create_topics([KpNewTopic("fits", 9999, 1)], validate_only=True)
        names = set(kp.list_topics())
    finally:
        kp.close()
    assert not names & {"huge", "half-a", "half-b", "even-a", "even-b", "fits"}
    del a, e, fs, f
    gc.collect()  # librdkafka clients go with their last reference
    w.survives_restart()
    kp = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=30000)
    try:
        assert "huge" not in kp.list_topics()
    finally:
        kp.close()


def test_create_partitions_to_20000(server_factory):
    """CreatePartitions adding more than 10,000 partitions is refused with
    POLICY_VIOLATION, validate_only included; the topic keeps its
    partition and its records."""
    srv = server_factory(name="partitions")
    w = Witness(srv, topic="grow")
    kp = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=30000)
    try:
        for validate_only in (False, True):
            with pytest.raises(PolicyViolationError) as e:
                kp.create_partitions({"grow": KpNewPartitions(total_count=20000)},
                                     validate_only=validate_only)
            assert TOO_MANY_PARTITIONS in str(e.value)
    finally:
        kp.close()
    a = AdminClient({"bootstrap.servers": srv.bootstrap})
    f = a.create_partitions([NewPartitions("grow", 20000)], request_timeout=30)["grow"]
    with pytest.raises(KafkaException) as e:
        f.result(30)
    assert e.value.args[0].code() == POLICY_VIOLATION
    # Exactly 10,000 more would be allowed (validated only).
    a.create_partitions([NewPartitions("grow", 10001)], validate_only=True)["grow"].result(30)
    assert len(a.list_topics("grow", timeout=10).topics["grow"].partitions) == 1
    del a, e, f
    gc.collect()  # librdkafka clients go with their last reference
    w.survives_restart()
    a = AdminClient({"bootstrap.servers": srv.bootstrap})
    assert len(a.list_topics("grow", timeout=10).topics["grow"].partitions) == 1
    del a
    gc.collect()


# -------------------------------------------------------------- replica id

def fetch(s, cid, version, replica_id, topic, partition_fields):
    req = FetchRequest[version](
        replica_id=replica_id, max_wait_time=0, min_bytes=0, max_bytes=MIB,
        isolation_level=0, topics=[(topic, [partition_fields])],
        **({"session_id": 0, "session_epoch": -1, "forgotten_topics_data": []}
           if version >= 7 else {}),
        **({"rack_id": ""} if version >= 11 else {}))
    s.sendall(wire.frame(wire.header(1, version, cid) + req.encode()))
    body = wire.recv_frame(s)
    assert struct.unpack_from(">i", body)[0] == cid
    resp = FetchResponse[version].decode(BytesIO(body[4:]))
    [(_, [part])] = resp.topics
    return part  # (partition, error_code, high_watermark, ...)


def test_fetch_claiming_replica_id_7(server_factory):
    """A Fetch from replica id 7 (no broker of this one-node cluster), or
    from this node's own id, gets Kafka's error for the partition and no
    records; a consumer fetch on the same connection reads everything."""
    srv = server_factory(name="replica")
    w = Witness(srv)
    with wire.connect(srv) as s:
        for replica_id in (7, 1):
            # v4: no leader epoch in the request.
            part = fetch(s, 10, 4, replica_id, "witness", (0, 0, MIB))
            assert (part[1], part[2]) == (NOT_LEADER_OR_FOLLOWER, -1)
            assert not part[-1]
            # v11: with the current leader epoch (0).
            part = fetch(s, 11, 11, replica_id, "witness", (0, 0, 0, -1, MIB))
            assert (part[1], part[2]) == (UNKNOWN_LEADER_EPOCH, -1)
            part = fetch(s, 12, 11, replica_id, "witness", (0, -1, 0, -1, MIB))
            assert part[1] == NOT_LEADER_OR_FOLLOWER
        part = fetch(s, 13, 4, -1, "witness", (0, 0, MIB))
        assert (part[1], part[2]) == (0, len(w.acked))
        assert part[-1]
    w.survives_restart()


# ------------------------------------------------------- start-up recovery

def test_corrupt_flushed_segment_truncates_only_itself_at_start(server_factory):
    """Flushed data changed on disk: a segment below the recovery point
    whose index is gone and whose last batch no longer matches its CRC.
    At start the index rebuild finds it, truncates that segment only
    (logged at error level) and keeps every later segment and record."""
    srv = server_factory(name="recovery")
    a = AdminClient({"bootstrap.servers": srv.bootstrap})
    a.create_topics([NewTopic("segments", 1, 1, config={"segment.bytes": "4096"})])[
        "segments"].result(30)
    del a
    gc.collect()
    p = Producer({"bootstrap.servers": srv.bootstrap, "acks": "all", "linger.ms": 0,
                  "batch.num.messages": 1})
    values = [f"record-{i:04}".encode() + b"." * 100 for i in range(150)]
    for v in values:
        p.produce("segments", v, partition=0)
        p.flush(30)
    del p
    assert srv.stop() == 0  # clean shutdown: everything below the recovery point
    folder = srv.data_dir / "segments-0"
    logs = sorted(folder.glob("*.log"))
    assert len(logs) >= 4, logs
    victim, after = logs[1], logs[2]
    (folder / (victim.stem + ".index")).unlink()
    data = bytearray(victim.read_bytes())
    data[-5] ^= 0xFF  # inside the last batch's records: CRC mismatch
    victim.write_bytes(bytes(data))
    srv.start()
    log = log_text(srv)
    assert "corruption below the recovery point found while rebuilding an index: " \
        "truncated this segment only" in log
    assert victim.name in log and "ERROR" in log
    assert sorted(folder.glob("*.log")) == logs  # no segment deleted
    c = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "recovery-reader",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("segments", 0, 0)])
    got = {}
    deadline = time.time() + 30
    while len(got) < len(values) - 1 and time.time() < deadline:
        m = c.poll(1)
        if m is not None and m.error() is None:
            got[m.offset()] = m.value()
    c.close()
    # Exactly the victim's last record is gone; the next segment and all
    # after it are whole.
    lost = int(after.stem) - 1
    assert sorted(got) == [o for o in range(len(values)) if o != lost]
    assert all(got[o] == values[o] for o in got)
    w = Witness(srv)
    w.survives_restart()
