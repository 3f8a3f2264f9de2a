"""Record validation on append (Kafka's LogValidator) through real clients
and raw Produce requests: keyless records refused by compacted topics with
per-record errors, hand-built bad batches refused with Kafka's error codes,
and topics whose `compression.type` names a codec storing every batch in it.
After each bad input the server is restarted and every acknowledged record
is still there."""
import struct
import time
from io import BytesIO

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic as CkNewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.record.util import calc_crc32c

import cli
import wire
from conftest import Server

CORRUPT_MESSAGE, INVALID_TIMESTAMP, INVALID_RECORD = 2, 32, 87


@pytest.fixture
def srv(tmp_path):
    s = Server(tmp_path / "data").start()
    yield s
    s.stop()


def create(server, topic, configs=None, partitions=1):
    a = AdminClient({"bootstrap.servers": server.bootstrap})
    fs = a.create_topics([CkNewTopic(topic, partitions, 1, config=configs or {})])
    fs[topic].result(timeout=30)


def read_all(server, topic, partition=0):
    """Every record of the partition as (offset, key, value, headers)."""
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None,
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    tp = TopicPartition(topic, partition)
    c.assign([tp])
    end = c.end_offsets([tp])[tp]
    out = []
    deadline = time.time() + 30
    while (not out or out[-1][0] < end - 1) and time.time() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            out.extend((r.offset, r.key, r.value, list(r.headers)) for r in recs)
    c.close()
    return out


def end_offset(server, topic, partition=0):
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None)
    tp = TopicPartition(topic, partition)
    end = c.end_offsets([tp])[tp]
    c.close()
    return end


# ---- keyless records into a compacted topic (confluent-kafka) ---------------------

def test_keyless_records_into_a_compacted_topic(srv):
    create(srv, "compacted", {"cleanup.policy": "compact"})
    reports = []

    def on_delivery(err, msg):
        reports.append((msg.key(), msg.value(), err, msg.offset()))

    p = Producer({"bootstrap.servers": srv.bootstrap, "acks": "all", "linger.ms": 20,
                  "log_level": 0})
    # Three requests: keyed, keyless, keyed; then one batch mixing both.
    for group in (["a", "b"], [None, None], ["c", "d"]):
        for i, k in enumerate(group):
            p.produce("compacted", key=k and k.encode(), value=b"v%d" % i, on_delivery=on_delivery)
        assert p.flush(30) == 0
    for k in ("e", None, "f"):
        p.produce("compacted", key=k and k.encode(), value=b"mixed", on_delivery=on_delivery)
    assert p.flush(30) == 0

    ok = [(k, off) for k, v, err, off in reports if err is None]
    failed = [(k, err.code()) for k, v, err, off in reports if err is not None]
    assert ok == [(b"a", 0), (b"b", 1), (b"c", 2), (b"d", 3)], reports
    # librdkafka (Produce v10) fails every record of a refused batch with
    # the partition's error: the keyless ones and the keyed ones beside them.
    assert failed == [(None, KafkaError.INVALID_RECORD)] * 2 + [
        (b"e", KafkaError.INVALID_RECORD), (None, KafkaError.INVALID_RECORD),
        (b"f", KafkaError.INVALID_RECORD)], reports

    expected = [(0, b"a", b"v0"), (1, b"b", b"v1"), (2, b"c", b"v0"), (3, b"d", b"v1")]
    assert [(o, k, v) for o, k, v, _ in read_all(srv, "compacted")] == expected
    srv.restart()
    assert [(o, k, v) for o, k, v, _ in read_all(srv, "compacted")] == expected
    assert end_offset(srv, "compacted") == 4


# ---- hand-built bad batches over a raw socket -------------------------------------

def varint(v):
    u = (v << 1) ^ (v >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def record(offset_delta, key, value, ts_delta=0):
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(len(value)) + value + varint(0)
    return varint(len(body)) + body


def batch(records, count, last_offset_delta=None, ts=None, crc=None):
    """A v2 batch around encoded `records` claiming `count` records."""
    ts = int(time.time() * 1000) if ts is None else ts
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", 0, lod, ts, ts, -1, -1, -1, count) + records
    c = calc_crc32c(after_crc) if crc is None else crc
    head = struct.pack(">iBI", -1, 2, c)  # leader epoch, magic, crc
    return struct.pack(">qi", 0, len(head) + len(after_crc)) + head + after_crc


def produce_v8(s, cid, topic, records):
    """Produce v8 (acks=all) of `records` to partition 0; returns
    (error_code, base_offset, log_start_offset, record_errors, error_message)."""
    from kafka.protocol.produce import ProduceRequest
    req = ProduceRequest[7](transactional_id=None, required_acks=-1, timeout=10000,
                            topics=[(topic, [(0, records)])])
    # v8's request is v7's; its response adds record_errors and error_message.
    s.sendall(wire.frame(wire.header(0, 8, cid) + req.encode()))
    body = BytesIO(wire.recv_frame(s))

    def i16():
        return struct.unpack(">h", body.read(2))[0]

    def i32():
        return struct.unpack(">i", body.read(4))[0]

    def i64():
        return struct.unpack(">q", body.read(8))[0]

    def string():
        n = i16()
        return None if n < 0 else body.read(n).decode()

    assert i32() == cid
    assert i32() == 1  # topics
    assert string() == topic
    assert i32() == 1  # partitions
    assert i32() == 0
    error, base, _append_time, log_start = i16(), i64(), i64(), i64()
    errors = [(i32(), string()) for _ in range(i32())]
    message = string()
    assert i32() == 0  # throttle
    assert body.read() == b""
    return error, base, log_start, errors, message


def test_hand_built_bad_batches_get_kafkas_errors(srv):
    create(srv, "raw")
    create(srv, "raw-compacted", {"cleanup.policy": "compact"})
    recs = [record(i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    good = b"".join(recs)
    cases = [
        ("claims more records than it holds", batch(good, 1000), INVALID_RECORD),
        ("claims 2^31-1 records", batch(good, 2**31 - 1), INVALID_RECORD),
        ("count and last offset delta disagree", batch(good, 3, last_offset_delta=7), INVALID_RECORD),
        ("wrong offset deltas", batch(b"".join(record(2 * i, b"k", b"v") for i in range(3)), 3),
         INVALID_RECORD),
        ("truncated record", batch(good[:-3], 3), INVALID_RECORD),
        ("trailing garbage inside the batch", batch(good + b"\x01\x02\x03", 3), INVALID_RECORD),
        ("record length off by one", batch(varint(len(recs[0])) + recs[0][1:] + b"".join(recs[1:]), 3),
         INVALID_RECORD),
        ("bad CRC", batch(good, 3, crc=12345), CORRUPT_MESSAGE),
    ]
    with wire.connect(srv) as s:
        for i, (what, records, want) in enumerate(cases):
            err, base, log_start, errors, message = produce_v8(s, 10 + i, "raw", records)
            assert (err, base, errors, message) == (want, -1, [], None), what
            # Kafka reports the log start offset except for corrupt batches.
            assert log_start == (-1 if want == CORRUPT_MESSAGE else 0), what
        # Keyless records into the compacted topic: per-record errors.
        keyless = batch(record(0, b"a", b"1") + record(1, None, b"2") + record(2, None, b"3"), 3)
        err, base, log_start, errors, message = produce_v8(s, 50, "raw-compacted", keyless)
        why = "Compacted topic cannot accept message without key in topic partition raw-compacted-0"
        assert (err, base, log_start) == (INVALID_RECORD, -1, 0)
        assert errors == [(1, why), (2, why)]
        assert message == ("One or more records have been rejected due to 2 record errors in total, "
                           "and only showing the first three errors at most: "
                           f"[RecordError(batchIndex=1, message='{why}'), "
                           f"RecordError(batchIndex=2, message='{why}')]")
        # A timestamp a day old in a topic that allows one minute.
        old = batch(record(0, b"a", b"1") + record(1, b"b", b"2", ts_delta=-86_400_000), 2)
        a = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
        a.create_topics([NewTopic("raw-ts", 1, 1,
                                  topic_configs={"message.timestamp.before.max.ms": "60000"})])
        a.close()
        err, base, _, errors, message = produce_v8(s, 51, "raw-ts", old)
        assert (err, base) == (INVALID_TIMESTAMP, -1)
        assert [i for i, _ in errors] == [1] and "is out of range" in errors[0][1]
        assert message == "One or more records have been rejected due to invalid timestamp"
        # The same connection still serves, and nothing above was appended.
        assert produce_v8(s, 60, "raw", batch(good, 3)) == (0, 0, 0, [], None)
        assert produce_v8(s, 61, "raw-compacted", batch(good, 3)) == (0, 0, 0, [], None)
    assert end_offset(srv, "raw") == 3
    assert end_offset(srv, "raw-compacted") == 3
    assert end_offset(srv, "raw-ts") == 0
    srv.restart()
    assert [(o, k, v) for o, k, v, _ in read_all(srv, "raw")] == \
        [(0, b"k0", b"v0"), (1, b"k1", b"v1"), (2, b"k2", b"v2")]
    assert end_offset(srv, "raw-compacted") == 3
    with wire.connect(srv) as s:
        assert produce_v8(s, 1, "raw", batch(good, 3)) == (0, 3, 0, [], None)


# ---- compression.type names a codec -----------------------------------------------

def stored_codecs(server, topic):
    codecs = []
    for log in sorted((server.data_dir / f"{topic}-0").glob("*.log")):
        out = cli.run(["dump-log", log]).stdout.decode()
        codecs += [line.split("compresscodec:")[1].split()[0]
                   for line in out.splitlines() if "compresscodec:" in line]
    return codecs


@pytest.mark.parametrize("topic_codec", ["zstd", "gzip"])
def test_topic_compression_type_recompresses(srv, topic_codec):
    topic = f"stored-{topic_codec}"
    a = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
    a.create_topics([NewTopic(topic, 1, 1, topic_configs={"compression.type": topic_codec})])
    a.close()
    sent = []
    for producer_codec in (None, "lz4"):
        p = KafkaProducer(bootstrap_servers=srv.bootstrap, acks="all", linger_ms=20,
                          compression_type=producer_codec)
        futures = []
        for i in range(200):
            key = b"key-%d" % i
            value = (b"value %d " % i) * 20
            headers = [("n", str(i).encode())]
            futures.append(p.send(topic, key=key, value=value, headers=headers, partition=0))
            sent.append((key, value, headers))
        for f in futures:
            f.get(timeout=30)
        p.close()
    got = read_all(srv, topic)
    assert [(k, v, h) for _, k, v, h in got] == sent
    assert [o for o, _, _, _ in got] == list(range(len(sent)))
    codecs = stored_codecs(srv, topic)
    assert codecs and set(codecs) == {topic_codec}, codecs
    srv.restart()
    assert [(k, v, h) for _, k, v, h in read_all(srv, topic)] == sent
    assert set(stored_codecs(srv, topic)) == {topic_codec}
