"""Transactions on the storage and fetch side (design 013), with
hand-built transactional batches (raw Produce v8) and raw WriteTxnMarkers
v1 requests standing in for a transactional producer and its coordinator:

- a confluent-kafka consumer with isolation.level=read_committed reads
  exactly the committed and non-transactional records, in offset order,
  and stops at an open transaction (the last stable offset) until its
  marker is written; read_uncommitted reads everything;
- kafka-python's read_committed consumer agrees;
- ListOffsets latest under read_committed answers the LSO (confluent-kafka
  AdminClient);
- all of that holds after a SIGKILL (the .txnindex and the LSO are
  rebuilt from the log) and after a clean restart.
"""
import signal
import struct
import time
from io import BytesIO

from confluent_kafka import OFFSET_BEGINNING, Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.produce import ProduceRequest
from kafka.record.util import calc_crc32c

import wire

WRITE_TXN_MARKERS = 27
TOPIC = "txs"


def varint(v):
    u = (v << 1) ^ (v >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def uvarint(u):
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def record(offset_delta, key, value):
    body = b"\x00" + varint(0) + varint(offset_delta)
    body += varint(len(key)) + key + varint(len(value)) + value + varint(0)
    return varint(len(body)) + body


def batch(keys, pid=-1, epoch=-1, seq=-1, transactional=False):
    """A v2 batch of records `key -> key`; transactional batches carry the
    producer id, epoch and base sequence."""
    ts = int(time.time() * 1000)
    recs = b"".join(record(i, k.encode(), k.encode()) for i, k in enumerate(keys))
    attributes = 0x10 if transactional else 0
    after_crc = struct.pack(">hiqqqhii", attributes, len(keys) - 1, ts, ts, pid, epoch, seq,
                            len(keys)) + recs
    head = struct.pack(">iBI", -1, 2, calc_crc32c(after_crc))
    return struct.pack(">qi", 0, len(head) + len(after_crc)) + head + after_crc


class Producer:
    """Raw Produce v8 to partition 0, with per-producer sequences."""

    def __init__(self, server):
        self.s = wire.connect(server)
        self.cid = 0
        self.seq = {}

    def send(self, keys, pid=None):
        if pid is None:
            records = batch(keys)
        else:
            seq = self.seq.get(pid, 0)
            self.seq[pid] = seq + len(keys)
            records = batch(keys, pid, 0, seq, transactional=True)
        self.cid += 1
        req = ProduceRequest[7](transactional_id=None, required_acks=-1, timeout=10000,
                                topics=[(TOPIC, [(0, records)])])
        self.s.sendall(wire.frame(wire.header(0, 8, self.cid) + req.encode()))
        body = BytesIO(wire.recv_frame(self.s))
        body.read(4 + 4 + 2 + len(TOPIC) + 4 + 4)
        (error,) = struct.unpack(">h", body.read(2))
        assert error == 0, error

    def markers(self, markers):
        """WriteTxnMarkers v1: markers = [(pid, commit)] on partition 0;
        returns [(pid, topic, partition, error)]."""
        body = uvarint(len(markers) + 1)
        for pid, commit in markers:
            body += struct.pack(">qh?", pid, 0, commit)
            body += uvarint(2)  # one topic
            body += uvarint(len(TOPIC) + 1) + TOPIC.encode()
            body += uvarint(2) + struct.pack(">i", 0) + b"\x00"  # partitions, topic tags
            body += struct.pack(">i", 0) + b"\x00"  # coordinator epoch, marker tags
        body += b"\x00"
        self.cid += 1
        self.s.sendall(wire.frame(
            wire.header(WRITE_TXN_MARKERS, 1, self.cid, flexible=True) + body))
        resp = BytesIO(wire.recv_frame(self.s))

        def unpack(fmt):
            return struct.unpack(fmt, resp.read(struct.calcsize(fmt)))[0]

        def compact_len():
            shift = n = 0
            while True:
                b = resp.read(1)[0]
                n |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    return n - 1

        assert unpack(">i") == self.cid
        assert resp.read(1) == b"\x00"  # header tags
        out = []
        for _ in range(compact_len()):
            pid = unpack(">q")
            for _ in range(compact_len()):
                name = resp.read(compact_len()).decode()
                for _ in range(compact_len()):
                    partition, error = unpack(">i"), unpack(">h")
                    assert resp.read(1) == b"\x00"
                    out.append((pid, name, partition, error))
                assert resp.read(1) == b"\x00"
            assert resp.read(1) == b"\x00"
        assert resp.read(1) == b"\x00"
        assert resp.read() == b""
        return out

    def close(self):
        self.s.close()


def consume(server, isolation, expect, timeout=30):
    """Keys read from the beginning with confluent-kafka until `expect`
    records arrived (then briefly for more)."""
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"g-{time.time()}",
                  "isolation.level": isolation, "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    keys = []
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and len(keys) < expect:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                keys.append(m.key().decode())
        # Anything beyond what is expected would show up now.
        end = time.time() + 1.5
        while time.time() < end:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                keys.append(m.key().decode())
    finally:
        c.close()
    return keys


def consume_kafka_python(server):
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None,
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      isolation_level="read_committed", consumer_timeout_ms=3000)
    c.assign([KTopicPartition(TOPIC, 0)])
    keys = [m.key.decode() for m in c]
    c.close()
    return keys


def latest(server, isolation):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    futures = admin.list_offsets({TopicPartition(TOPIC, 0): OffsetSpec.latest()},
                                 isolation_level=isolation, request_timeout=10)
    return futures[TopicPartition(TOPIC, 0)].result().offset


def test_read_committed_consumers_skip_aborted_records(server):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(10)
    p = Producer(server)
    a, b, c = 5000, 5001, 5002
    p.send(["a0", "a1"], a)      # 0-1 committed
    p.send(["b0", "b1"], b)      # 2-3 aborted
    p.send(["p0"])               # 4
    p.send(["a2"], a)            # 5
    assert p.markers([(b, False), (a, True)]) == [
        (b, TOPIC, 0, 0), (a, TOPIC, 0, 0)]   # 6, 7
    p.send(["b2"], b)            # 8 aborted
    p.send(["a3"], a)            # 9 committed
    assert p.markers([(b, False)]) == [(b, TOPIC, 0, 0)]  # 10
    assert p.markers([(a, True)]) == [(a, TOPIC, 0, 0)]   # 11
    p.send(["c0"], c)            # 12, left open
    p.send(["p1"])               # 13
    committed = ["a0", "a1", "p0", "a2", "a3"]
    everything = ["a0", "a1", "b0", "b1", "p0", "a2", "b2", "a3", "c0", "p1"]

    assert consume(server, "read_committed", len(committed)) == committed
    assert consume(server, "read_uncommitted", len(everything)) == everything
    assert consume_kafka_python(server) == committed
    assert latest(server, IsolationLevel.READ_COMMITTED) == 12
    assert latest(server, IsolationLevel.READ_UNCOMMITTED) == 14

    # The open transaction commits: the LSO reaches the high watermark.
    assert p.markers([(c, True)]) == [(c, TOPIC, 0, 0)]  # 14
    committed += ["c0", "p1"]
    assert consume(server, "read_committed", len(committed)) == committed
    assert latest(server, IsolationLevel.READ_COMMITTED) == 15

    # A last aborted transaction left open at the kill.
    p.send(["b3"], b)            # 15
    p.send(["p2"])               # 16
    p.close()
    committed_before_kill = list(committed)
    server.restart(signal.SIGKILL)
    # Rebuilt from the log: the LSO still stops at b3's open transaction.
    assert latest(server, IsolationLevel.READ_COMMITTED) == 15
    assert consume(server, "read_committed", len(committed_before_kill)) == committed_before_kill
    p = Producer(server)
    assert p.markers([(b, False)]) == [(b, TOPIC, 0, 0)]  # 17
    p.close()
    committed += ["p2"]
    assert consume(server, "read_committed", len(committed)) == committed
    assert consume_kafka_python(server) == committed
    # A clean restart keeps the index and the LSO.
    server.restart()
    assert latest(server, IsolationLevel.READ_COMMITTED) == 18
    assert consume(server, "read_committed", len(committed)) == committed
    assert consume_kafka_python(server) == committed


def test_markers_for_partitions_not_here(server):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(10)
    p = Producer(server)
    # Partition 0 of a topic that does not exist.
    body = uvarint(2) + struct.pack(">qh?", 1, 0, True) + uvarint(2)
    body += uvarint(len("nope") + 1) + b"nope" + uvarint(2) + struct.pack(">i", 0) + b"\x00"
    body += struct.pack(">i", 0) + b"\x00" + b"\x00"
    p.s.sendall(wire.frame(wire.header(WRITE_TXN_MARKERS, 1, 99, flexible=True) + body))
    resp = wire.recv_frame(p.s)
    # cid, tags, 1 marker, pid 1, 1 topic "nope", 1 partition: 0 with
    # UNKNOWN_TOPIC_OR_PARTITION (3).
    expected = (struct.pack(">i", 99) + b"\x00" + uvarint(2) + struct.pack(">q", 1) + uvarint(2)
                + uvarint(5) + b"nope" + uvarint(2) + struct.pack(">ih", 0, 3)
                + b"\x00" + b"\x00" + b"\x00" + b"\x00")
    assert resp == expected
    p.close()
