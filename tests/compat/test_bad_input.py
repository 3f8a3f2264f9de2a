"""Bad input against one server: garbage, truncated and oversized frames,
unknown APIs and versions, illegal topic names and configs. Each closes at
most its own connection or gets an error code; a client connected the whole
time keeps working and the process never panics."""
import random
import socket
import struct
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (InvalidConfigurationError, InvalidPartitionsError,
                          InvalidReplicationFactorError, InvalidTopicError)

import wire
from conftest import Server

MIB = 1 << 20


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("bad") / "data").start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def witness(srv):
    """A raw connection and a kafka-python producer, both opened before any
    bad input and used after each test."""
    sock = wire.connect(srv)
    assert wire.api_versions_v0(sock, correlation_id=100)[0] == 0
    producer = KafkaProducer(bootstrap_servers=srv.bootstrap, acks="all")
    producer.send("witness", b"first").get(timeout=10)
    w = {"sock": sock, "producer": producer, "sent": 1, "cid": 100}
    yield w
    producer.close()
    sock.close()


@pytest.fixture(autouse=True)
def still_serving(srv, witness):
    yield
    assert srv.proc.poll() is None, srv.log()
    # The raw connection still answers, in order...
    witness["cid"] += 1
    assert wire.api_versions_v0(witness["sock"], correlation_id=witness["cid"])[0] == 0
    # ...and so does the client's.
    witness["producer"].send("witness", b"after").get(timeout=10)
    witness["sent"] += 1


def vm_peak_kib(srv):
    for line in open(f"/proc/{srv.proc.pid}/status"):
        if line.startswith("VmPeak:"):
            return int(line.split()[1])
    raise AssertionError("no VmPeak")


def send_then_eof(s, data):
    """Sends, then half-closes; the server may have closed first."""
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def test_random_bytes(srv):
    rng = random.Random(7)
    for i in range(40):
        with wire.connect(srv) as s:
            if i % 2:
                # A well-formed frame of garbage: header and body random.
                s.sendall(wire.frame(rng.randbytes(rng.randrange(1, 2000))))
            else:
                # Garbage from the first byte (the size too), then EOF.
                send_then_eof(s, rng.randbytes(rng.randrange(1, 2000)))
            assert wire.closed_by_peer(s), i


def test_truncated_requests(srv):
    # The header alone in a frame that announces more: EOF mid-frame.
    metadata_v12 = wire.header(3, 12, 1, flexible=True)
    with wire.connect(srv) as s:
        send_then_eof(s, struct.pack(">i", len(metadata_v12) + 50) + metadata_v12)
        assert wire.closed_by_peer(s)
    # A complete frame whose body stops early: a decode error.
    with wire.connect(srv) as s:
        s.sendall(wire.frame(metadata_v12 + b"\x05"))  # 4 topics announced, none there
        assert wire.closed_by_peer(s)
    # Fewer bytes than a request header.
    with wire.connect(srv) as s:
        s.sendall(wire.frame(b"\x00\x03\x00"))
        assert wire.closed_by_peer(s)
    # A stalled half-request does not hold anyone else up.
    stalled = wire.connect(srv)
    stalled.sendall(struct.pack(">i", 1000) + metadata_v12)
    with wire.connect(srv) as s:
        assert wire.api_versions_v0(s)[0] == 0
    stalled.close()


@pytest.mark.parametrize("size", [200 * MIB, 100 * MIB + 1, 2**31 - 1, -1, -(2**31)])
def test_size_over_socket_request_max_bytes(srv, size):
    """A size outside 0..socket.request.max.bytes (100 MiB) closes the
    connection at once, before any body arrives and without allocating."""
    peak = vm_peak_kib(srv)
    with wire.connect(srv) as s:
        s.sendall(struct.pack(">i", size))
        start = time.time()
        assert wire.closed_by_peer(s, timeout=5)
        assert time.time() - start < 2
    assert vm_peak_kib(srv) - peak < 50 * 1024, "the server reserved memory for the frame"


def test_size_at_limit_is_read(srv):
    """100 MiB exactly is allowed: the server waits for the body rather than
    closing (we then close without sending it)."""
    with wire.connect(srv) as s:
        s.sendall(struct.pack(">i", 100 * MIB))
        assert not wire.closed_by_peer(s, timeout=0.5)


@pytest.mark.parametrize("key", [999, 32767, -1, 1000])
def test_unknown_api_key(srv, key):
    with wire.connect(srv) as s:
        s.sendall(wire.frame(wire.header(key, 0, 7)))
        assert wire.closed_by_peer(s)


def test_api_versions_unsupported_version(srv):
    with wire.connect(srv) as s:
        error, apis = wire.api_versions_v0(s, correlation_id=42, version=99)
        assert error == 35  # UNSUPPORTED_VERSION, in the v0 layout
        assert apis[18][0] == 0 and apis[18][1] >= 3  # ApiVersions itself
        for key in (0, 1, 2, 3, 19, 20):  # Produce, Fetch, ListOffsets, Metadata, Create/DeleteTopics
            assert key in apis and apis[key][0] <= apis[key][1], (key, apis)
        # The connection stays open for the retry at a version we speak.
        assert wire.api_versions_v3(s, correlation_id=43) == 0
        assert wire.api_versions_v0(s, correlation_id=44) == (0, apis)


def test_other_api_at_unsupported_version(srv):
    """Any API but ApiVersions at a version outside the advertised range:
    the connection is closed, as Kafka does."""
    with wire.connect(srv) as s:
        s.sendall(wire.frame(wire.header(3, 99, 9)))
        assert wire.closed_by_peer(s)


@pytest.fixture(scope="module")
def admin(srv):
    a = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
    yield a
    a.close()


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x" * 250, "a/b", "ü", "tab\there"])
def test_illegal_topic_names(admin, name):
    with pytest.raises(InvalidTopicError) as e:  # INVALID_TOPIC_EXCEPTION (17)
        admin.create_topics([NewTopic(name, 1, 1)])
    assert e.value.errno == 17


def test_longest_legal_topic_name(admin):
    admin.create_topics([NewTopic("x" * 249, 1, 1)])
    assert "x" * 249 in admin.list_topics()


@pytest.mark.parametrize("configs", [
    {"retention.ms": "abc"},
    {"segment.bytes": "-5"},
    {"cleanup.policy": "sometimes"},
    {"no.such.config": "1"},
    {"max.message.bytes": "99999999999999999999"},
])
def test_invalid_topic_configs(admin, configs):
    with pytest.raises(InvalidConfigurationError) as e:  # INVALID_CONFIG (40)
        admin.create_topics([NewTopic("configured", 1, 1, topic_configs=configs)])
    assert e.value.errno == 40
    assert "configured" not in admin.list_topics()


def test_invalid_partitions_and_replication(admin):
    with pytest.raises(InvalidPartitionsError):  # 37
        admin.create_topics([NewTopic("p0", 0, 1)])
    with pytest.raises(InvalidReplicationFactorError):  # 38
        admin.create_topics([NewTopic("rf3", 1, 3)])
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics([NewTopic("rf0", 1, 0)])
    assert not {"p0", "rf3", "rf0"} & set(admin.list_topics())


def produce_raw(s, cid, records_by_partition, topic="corrupt", acks=-1, version=7):
    """A Produce request (v3-v7) with the given record bytes per partition;
    returns {partition: (error_code, base_offset)}. (kafka-python's v8
    response schema nests its new fields at the wrong level.)"""
    from io import BytesIO

    from kafka.protocol.produce import ProduceRequest, ProduceResponse
    req = ProduceRequest[version](transactional_id=None, required_acks=acks, timeout=10000,
                                  topics=[(topic, list(records_by_partition.items()))])
    s.sendall(wire.frame(wire.header(0, version, cid) + req.encode()))
    body = wire.recv_frame(s)
    assert struct.unpack_from(">i", body)[0] == cid
    resp = ProduceResponse[version].decode(BytesIO(body[4:]))
    [(_, parts)] = resp.topics
    return {p[0]: (p[1], p[2]) for p in parts}


def batch(values, magic=2, compression=0):
    from kafka.record.memory_records import MemoryRecordsBuilder
    b = MemoryRecordsBuilder(magic=magic, compression_type=compression, batch_size=1 << 20)
    for v in values:
        b.append(timestamp=None, key=None, value=v, headers=[])
    b.close()
    return bytes(b.buffer())


CORRUPT_MESSAGE, INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE = 2, 87, 76


def test_corrupt_record_batches(srv, admin):
    """Produce with broken batches gets Kafka's error code for the
    partition (ProduceRequest.validateRecords, then the CRC check) and
    appends nothing; the connection stays usable."""
    admin.create_topics([NewTopic("corrupt", 1, 1)])
    good = batch([b"a", b"b", b"c"])
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF  # payload byte: CRC mismatch
    bad_length = bytearray(good)
    struct.pack_into(">i", bad_length, 8, len(good) * 10)  # batchLength past the end
    tiny_length = bytearray(good)
    struct.pack_into(">i", tiny_length, 8, 5)  # shorter than a batch header
    cases = [
        ("crc", bytes(flipped), CORRUPT_MESSAGE),
        ("batch length below the header", bytes(tiny_length), CORRUPT_MESSAGE),
        # Kafka's batch iterator stops at a partial batch: no batch at all.
        ("truncated", good[:-5], INVALID_RECORD),
        ("batch length past the end", bytes(bad_length), INVALID_RECORD),
        ("header only", good[:30], INVALID_RECORD),
        ("empty", b"", INVALID_RECORD),
        ("two batches", good + good, INVALID_RECORD),
        ("magic 1", batch([b"old"], magic=1), INVALID_RECORD),
        ("garbage", random.Random(3).randbytes(300), None),
    ]
    with wire.connect(srv) as s:
        for i, (what, records, want) in enumerate(cases):
            [(err, offset)] = produce_raw(s, 10 + i, {0: records}).values()
            assert err == want if want else err in (CORRUPT_MESSAGE, INVALID_RECORD), (what, err)
            assert offset == -1, what
        # zstd needs Produce v7.
        zstd = batch([b"z" * 100] * 10, compression=4)
        assert zstd[22] & 7 == 4  # really zstd (kafka-python skips codecs that do not shrink)
        assert produce_raw(s, 50, {0: zstd}, version=6) == {0: (UNSUPPORTED_COMPRESSION_TYPE, -1)}
        assert produce_raw(s, 51, {0: good}) == {0: (0, 0)}
        assert produce_raw(s, 52, {0: zstd}, version=7) == {0: (0, 3)}
    c = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=None)
    tp = TopicPartition("corrupt", 0)
    assert c.end_offsets([tp]) == {tp: 13}
    c.close()


def produce_acks0(s, cid, topic, partition, records):
    from kafka.protocol.produce import ProduceRequest
    req = ProduceRequest[7](transactional_id=None, required_acks=0, timeout=10000,
                            topics=[(topic, [(partition, records)])])
    s.sendall(wire.frame(wire.header(0, 7, cid) + req.encode()))


def test_acks0_produce_gets_no_response(srv, admin):
    admin.create_topics([NewTopic("fire-and-forget", 1, 1)])
    with wire.connect(srv) as s:
        produce_acks0(s, 1, "fire-and-forget", 0, batch([b"one", b"two"]))
        # The next answer on the connection is the next request's.
        assert wire.api_versions_v0(s, correlation_id=2)[0] == 0
    c = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=None)
    tp = TopicPartition("fire-and-forget", 0)
    assert c.end_offsets([tp]) == {tp: 2}
    c.close()


def test_acks0_produce_error_closes_connection(srv, admin):
    """Kafka closes the connection when an acks=0 produce fails for a
    partition: the producer has no response to read the error from."""
    admin.create_topics([NewTopic("acks0-one-partition", 1, 1)])
    with wire.connect(srv) as s:
        produce_acks0(s, 1, "acks0-one-partition", 5, batch([b"nowhere"]))
        assert wire.closed_by_peer(s, timeout=2)


def test_garbage_bodies_for_every_api(srv):
    """Every advertised API at every advertised version, with a random
    body: the server answers or closes that connection, and lives."""
    rng = random.Random(11)
    apis = wire.advertised(srv)
    conns = []
    for key, (lo, hi) in sorted(apis.items()):
        for version in range(lo, hi + 1):
            for n in (0, 3, 40, 400):
                s = wire.connect(srv)
                try:
                    s.sendall(wire.frame(wire.header(key, version, 1) + rng.randbytes(n)))
                except OSError:
                    pass
                conns.append(s)
        if len(conns) > 200:
            time.sleep(0.2)
            for s in conns:
                s.close()
            conns = []
    time.sleep(0.2)
    for s in conns:
        s.close()
    assert srv.proc.poll() is None


def test_survivors(srv, witness):
    """After all of it: the witness's records are all there, and the log
    has no panic."""
    c = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=None, enable_auto_commit=False)
    tp = TopicPartition("witness", 0)
    assert c.end_offsets([tp]) == {tp: witness["sent"]}
    c.close()
    log = srv.log_path.read_text(errors="replace")
    assert "panicked" not in log
    assert "closing connection" in log  # the bad inputs were seen and refused
