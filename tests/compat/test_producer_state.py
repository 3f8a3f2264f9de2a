"""Producer state through the server (design 009): hand-built idempotent
batches (producer id, epoch, sequence) over raw Produce v8 requests. A
retry is answered with the original offset and appends nothing, a gap gets
OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch INVALID_PRODUCER_EPOCH; all of
that holds across a clean restart (SIGTERM: snapshot at the log end), an
unclean one (SIGKILL: snapshot plus replayed tail) and segment rolls, and
the records read back once each with a real consumer."""
import signal
import struct
import time
from io import BytesIO

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.produce import ProduceRequest
from kafka.record.util import calc_crc32c

import wire
from conftest import Server

OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH = 45, 47


def varint(v):
    u = (v << 1) ^ (v >> 63)
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


def idempotent_batch(pid, epoch, seq, count, ts):
    """A v2 batch of `count` records from producer `pid` at `epoch`,
    sequences from `seq`."""
    recs = b"".join(record(i, b"p%d-s%d" % (pid, seq + i), b"v" * 20) for i in range(count))
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, ts, ts, pid, epoch, seq, count) + recs
    head = struct.pack(">iBI", -1, 2, calc_crc32c(after_crc))
    return struct.pack(">qi", 0, len(head) + len(after_crc)) + head + after_crc


def produce(s, cid, topic, records):
    """Produce v8 (acks=all) to partition 0: (error_code, base_offset,
    log_append_time, log_start_offset)."""
    req = ProduceRequest[7](transactional_id=None, required_acks=-1, timeout=10000,
                            topics=[(topic, [(0, records)])])
    s.sendall(wire.frame(wire.header(0, 8, cid) + req.encode()))
    body = BytesIO(wire.recv_frame(s))

    def unpack(fmt):
        return struct.unpack(fmt, body.read(struct.calcsize(fmt)))[0]

    assert unpack(">i") == cid
    assert unpack(">i") == 1
    assert body.read(unpack(">h")).decode() == topic
    assert unpack(">i") == 1
    assert unpack(">i") == 0
    result = (unpack(">h"), unpack(">q"), unpack(">q"), unpack(">q"))
    assert unpack(">i") == 0  # record errors
    assert unpack(">h") == -1  # error message
    assert unpack(">i") == 0  # throttle
    assert body.read() == b""
    return result


def read_keys(server, topic):
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None,
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    end = c.end_offsets([tp])[tp]
    out = []
    deadline = time.time() + 30
    while len(out) < end and time.time() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            out.extend((r.offset, r.key) for r in recs)
    c.close()
    return end, out


@pytest.fixture
def srv(tmp_path):
    s = Server(tmp_path / "data").start()
    yield s
    s.stop()


def test_duplicates_and_sequence_errors_survive_restarts(srv):
    from kafka.admin import KafkaAdminClient, NewTopic
    a = KafkaAdminClient(bootstrap_servers=srv.bootstrap)
    # Small segments, so the producer's batches span rolls and snapshots.
    a.create_topics([NewTopic("idem", 1, 1, topic_configs={"segment.bytes": "1024"})])
    a.close()
    ts = int(time.time() * 1000)
    pid, sent = 4242, []  # (seq, base offset)
    cid = iter(range(100, 10_000))

    def send(seq, count=3, epoch=0):
        with wire.connect(srv) as s:
            return produce(s, next(cid), "idem", idempotent_batch(pid, epoch, seq, count, ts))

    for seq in range(0, 60, 3):
        err, base, _, _ = send(seq)
        assert err == 0, seq
        sent.append((seq, base))
    assert [b for _, b in sent] == list(range(0, 60, 3))

    def check_state(what):
        # The last batch's retry: its offset, no error, nothing appended.
        seq, base = sent[-1]
        err, got, append_time, log_start = send(seq)
        assert (err, got, append_time, log_start) == (0, base, ts, 0), what
        # A gap and an old epoch are refused.
        assert send(seq + 6)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER, what
        assert send(seq + 3, epoch=-1)[0] == INVALID_PRODUCER_EPOCH, what

    # Retries of each of the last five batches.
    for seq, base in sent[-5:]:
        assert send(seq)[:2] == (0, base)
    check_state("running")

    srv.restart(signal.SIGTERM)
    check_state("after a clean restart")
    err, base, _, _ = send(60)
    assert (err, base) == (0, 60)
    sent.append((60, 60))

    srv.restart(signal.SIGKILL)
    check_state("after SIGKILL")
    # The tail after the snapshot was replayed: every batch of the last
    # segment is still recognized.
    assert send(57)[:2] == (0, 57)
    err, base, _, _ = send(63)
    assert (err, base) == (0, 63)

    end, keys = read_keys(srv, "idem")
    assert end == 66
    assert [k for _, k in keys] == [b"p%d-s%d" % (pid, s) for s in range(66)]
    assert [o for o, _ in keys] == list(range(66))
    folder = srv.data_dir / "idem-0"
    segments = sorted(folder.glob("*.log"))
    snapshots = sorted(folder.glob("*.snapshot"))
    assert len(segments) > 3, segments
    assert snapshots, "producer snapshots in the partition folder"
    assert all(len(p.stem) == 20 for p in snapshots), snapshots
