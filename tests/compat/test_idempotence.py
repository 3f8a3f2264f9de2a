"""Idempotent producers (issue #10): InitProducerId hands out producer ids
that never repeat, across clean restarts and SIGKILL; and the default
producers of kafka-python 3 (acks="all"), confluent-kafka
(enable.idempotence=true), kafkajs (idempotent: true) and sluice-client
(`sluice produce`, idempotent by default) each send 100,000 records while
the broker is SIGKILLed and restarted twice mid-stream, after which every
partition holds every record exactly once, in send order.

The exactly-once checks need the broker's duplicate detection (producer
state per partition, sequence checks, rebuilt after a restart); without it
a batch written just before a kill, whose answer was lost, is appended
again when the producer re-sends it."""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

import wire
from conftest import BIN

HERE = Path(__file__).resolve().parent
KAFKAJS = HERE.parent / "kafkajs"
INIT_PRODUCER_ID = 22
N = 100_000
RATE = 10_000  # records/s, so that the kills land mid-stream
PARTITIONS = 3
KILL_AT = (30_000, 65_000)

NONE, INVALID_REQUEST = 0, 42


# ------------------------------------------------------------ InitProducerId

def init_request(version, correlation_id, txn=None, pid=-1, epoch=-1, timeout_ms=60_000):
    flexible = version >= 2
    if txn is None:
        t = b"\x00" if flexible else struct.pack(">h", -1)
    else:
        raw = txn.encode()
        t = (bytes([len(raw) + 1]) if flexible else struct.pack(">h", len(raw))) + raw
    body = t + struct.pack(">i", timeout_ms)
    if version >= 3:
        body += struct.pack(">qh", pid, epoch)
    if flexible:
        body += b"\x00"
    return wire.frame(wire.header(INIT_PRODUCER_ID, version, correlation_id, flexible=flexible) + body)


def read_init_response(s, version, correlation_id):
    """(error code, producer id, epoch)."""
    body = wire.recv_frame(s)
    (cid,) = struct.unpack_from(">i", body, 0)
    assert cid == correlation_id, (cid, correlation_id)
    at = 4 + (1 if version >= 2 else 0)  # response header v1: tagged fields
    _throttle, error, pid, epoch = struct.unpack_from(">ihqh", body, at)
    return error, pid, epoch


def init_ids(server, count, version=4):
    """`count` InitProducerId answers, pipelined on one connection."""
    with wire.connect(server, timeout=30) as s:
        s.sendall(b"".join(init_request(version, i) for i in range(count)))
        return [read_init_response(s, version, i) for i in range(count)]


def test_init_producer_id_versions_and_refusals(server):
    assert wire.advertised(server)[INIT_PRODUCER_ID] == (0, 5)
    got = []
    with wire.connect(server) as s:
        for v in range(6):
            s.sendall(init_request(v, v))
            got.append(read_init_response(s, v, v))
        assert got == [(NONE, i, 0) for i in range(6)]
        # KIP-360 fields: both or neither.
        s.sendall(init_request(4, 10, pid=3, epoch=-1))
        assert read_init_response(s, 4, 10) == (INVALID_REQUEST, -1, -1)
        # The current id and epoch of an idempotent producer: a new id, as
        # Kafka answers (no state is kept for idempotent producer ids).
        s.sendall(init_request(4, 11, pid=5, epoch=0))
        assert read_init_response(s, 4, 11) == (NONE, 6, 0)
        # Transactional ids go to the transaction coordinator: a producer
        # id of their own from the same allocator, its epoch bumped by the
        # next InitProducerId.
        s.sendall(init_request(1, 12, txn=""))
        assert read_init_response(s, 1, 12) == (INVALID_REQUEST, -1, -1)
        for v, epoch in ((1, 0), (4, 1)):
            s.sendall(init_request(v, 13, txn="tx-1"))
            assert read_init_response(s, v, 13) == (NONE, 7, epoch)


def test_producer_ids_never_repeat_across_restarts_and_sigkill(server):
    seen = []

    def take(count):
        answers = init_ids(server, count)
        assert all(e == NONE and epoch == 0 for e, _, epoch in answers), answers[:3]
        ids = [pid for _, pid, _ in answers]
        assert ids == sorted(ids) and len(set(ids)) == count
        assert not set(ids) & set(seen), "an id handed out twice"
        seen.extend(ids)
        return ids

    first = take(1100)  # crosses into the second block of 1000
    assert first[0] == 0 and first[-1] == 1099
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGKILL):
        before = max(seen)
        server.restart(sig)
        ids = take(50)
        # The rest of the block in use when the process stopped is skipped.
        assert ids[0] > before and ids[0] % 1000 == 0, (before, ids[0])
    assert "panicked" not in server.log_path.read_text(errors="replace")


# ------------------------------------------- 100,000 records through 2 kills

def create_topic(server, topic):
    a = AdminClient({"bootstrap.servers": server.bootstrap})
    a.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)


def read_back(server, topic):
    """{partition: [int(value) in offset order]}."""
    a = AdminClient({"bootstrap.servers": server.bootstrap})
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = {tp.partition: f.result(timeout=30).offset
            for tp, f in a.list_offsets({tp: OffsetSpec.latest() for tp in tps}).items()}
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "log_level": 0})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out = {p: [] for p in range(PARTITIONS)}
    deadline = time.time() + 120
    while sum(map(len, out.values())) < sum(ends.values()) and time.time() < deadline:
        for m in c.consume(num_messages=10_000, timeout=0.5):
            assert m.error() is None, m.error()
            assert m.offset() == len(out[m.partition()]), "offsets consecutive"
            out[m.partition()].append(int(m.value()))
    c.close()
    assert {p: len(v) for p, v in out.items()} == ends
    return out


def assert_exactly_once_in_order(parts):
    problems = []
    everything = []
    for p, values in sorted(parts.items()):
        dups = len(values) - len(set(values))
        backwards = sum(1 for a, b in zip(values, values[1:]) if b <= a)
        if dups or backwards:
            problems.append(f"partition {p}: {len(values)} records, {dups} duplicates, "
                            f"{backwards} out of send order")
        everything.extend(values)
    missing = sorted(set(range(N)) - set(everything))
    if missing:
        problems.append(f"{len(missing)} records missing, first {missing[:5]}")
    assert not problems, "; ".join(problems)


class Progress:
    """Reads a child's stdout: `sent I` lines and the last JSON line."""

    def __init__(self, stream):
        self.sent = 0
        self.summary = None
        self.lines = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for raw in stream:
            line = raw.decode(errors="replace").strip()
            self.lines.append(line)
            if line.startswith("sent "):
                self.sent = int(line.split()[1])
            elif line.startswith("{"):
                self.summary = json.loads(line)


def feed_lines(proc, progress):
    """Writes `k<i % 30>:<i>` lines to a `sluice produce` at RATE lines/s."""
    start = time.monotonic()
    try:
        for i in range(0, N, 1000):
            proc.stdin.write("".join(f"k{j % 30}:{j}\n" for j in range(i, i + 1000)).encode())
            proc.stdin.flush()
            progress.sent = i + 1000
            ahead = (i + 1000) / RATE - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    finally:
        proc.stdin.close()


def produce_through_kills(server, cmd, feed=False, timeout=600):
    """Runs the producer `cmd`, SIGKILLs the broker when the producer has
    sent KILL_AT records and restarts it (same port and data); returns the
    producer's exit code, summary and output."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if feed else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    progress = Progress(proc.stdout)
    err = []
    threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True).start()
    if feed:
        threading.Thread(target=feed_lines, args=(proc, progress), daemon=True).start()
    deadline = time.time() + timeout
    for mark in KILL_AT:
        while progress.sent < mark and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, f"the producer ended before {mark} records: {err}"
        server.stop(signal.SIGKILL)
        time.sleep(0.3)
        server.start()
    code = proc.wait(timeout=max(1, deadline - time.time()))
    progress.thread.join(timeout=10)
    time.sleep(0.1)
    stderr = err[0].decode(errors="replace") if err else ""
    return code, progress.summary, stderr[-4000:]


def check_run(server, topic, code, summary, stderr):
    assert code == 0, f"producer exited {code}: {stderr}"
    if summary is not None:
        assert summary["idempotent"], summary
        assert (summary["acked"], summary["failed"]) == (N, 0), summary
    assert_exactly_once_in_order(read_back(server, topic))
    assert "panicked" not in server.log_path.read_text(errors="replace")


def test_kafka_python_defaults_with_acks_all(server):
    py = os.environ.get("SLUICETEST_PYTHON_KP3")
    assert py, ("SLUICETEST_PYTHON_KP3 is not set: run scripts/test.sh, which installs "
                "kafka-python 3 into target/test-venv-kp3")
    create_topic(server, "idem-kafka-python")
    run = produce_through_kills(server, [py, str(HERE / "idempotent_producer.py"), "kafka-python",
                                         server.bootstrap, "idem-kafka-python", str(N), str(RATE)])
    check_run(server, "idem-kafka-python", *run)


def test_confluent_kafka_enable_idempotence(server):
    create_topic(server, "idem-confluent")
    run = produce_through_kills(server, [sys.executable, str(HERE / "idempotent_producer.py"),
                                         "confluent", server.bootstrap, "idem-confluent", str(N),
                                         str(RATE)])
    check_run(server, "idem-confluent", *run)


def test_kafkajs_idempotent(server):
    node = shutil.which("node")
    assert node, "node is not installed (scripts/test.sh needs node and npm)"
    assert (KAFKAJS / "node_modules" / "kafkajs").is_dir(), (
        "kafkajs is not installed: run `npm ci` in tests/kafkajs (scripts/test.sh does)")
    create_topic(server, "idem-kafkajs")
    os.environ["SLUICE_BOOTSTRAP"] = server.bootstrap
    try:
        run = produce_through_kills(server, [node, str(KAFKAJS / "idempotent.js"), "idem-kafkajs",
                                             str(N), str(RATE)])
    finally:
        del os.environ["SLUICE_BOOTSTRAP"]
    check_run(server, "idem-kafkajs", *run)


def test_sluice_produce_idempotent_by_default(server):
    create_topic(server, "idem-sluice")
    run = produce_through_kills(server, [BIN, "produce", "--bootstrap-server", server.bootstrap,
                                         "--topic", "idem-sluice", "--key-separator", ":"],
                                feed=True)
    check_run(server, "idem-sluice", *run)


def test_describe_producers_with_kafka_python_admin(server):
    """kafka-python 3's KafkaAdminClient.describe_producers after its own
    idempotent producer wrote 10 records (one at a time) to partition 0:
    that producer, epoch 0, last sequence 9, no transaction; nobody on
    partition 1; a missing topic is UNKNOWN_TOPIC_OR_PARTITION. Needs the
    broker's producer state (the `pstate` branch)."""
    py = os.environ.get("SLUICETEST_PYTHON_KP3")
    assert py, "SLUICETEST_PYTHON_KP3 is not set (kafka-python 3's virtualenv)"
    run = subprocess.run([py, str(HERE / "describe_producers_check.py"), server.bootstrap,
                          "described"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    pid, epoch = got["producer"]
    assert epoch == 0 and pid >= 0, got
    assert got["states"] == {"0": [[pid, 0, 9, -1, -1]], "1": []}, got
    assert got["missing"] == "UnknownTopicOrPartitionError", got


def test_kafka_python_2_enable_idempotence(server):
    """kafka-python 2.2 with enable_idempotence=True (InitProducerId v0/v1,
    one request in flight): 2,000 records, each read back once, in order,
    all written under the producer id it was given at epoch 0."""
    from kafka import KafkaProducer

    create_topic(server, "idem-kp2")
    p = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=True)
    futures = [p.send("idem-kp2", key=b"k%d" % (i % 30), value=b"%d" % i) for i in range(2000)]
    p.flush(timeout=60)
    assert all(f.get(timeout=10) for f in futures)
    pid = p._transaction_manager.producer_id_and_epoch
    assert pid.producer_id >= 0 and pid.epoch == 0, pid
    p.close()
    parts = read_back(server, "idem-kp2")
    assert sorted(v for vs in parts.values() for v in vs) == list(range(2000))
    for values in parts.values():
        assert values == sorted(values)
