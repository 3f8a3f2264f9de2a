"""Exactly-once with real clients against a real `sluice server`, the
acceptance checks of the transactions issue that need processes to die:

- consume-transform-produce (confluent-kafka, send_offsets_to_transaction)
  SIGKILLed at random points and restarted 20 times: every input appears
  exactly once in the read_committed output and the committed offsets
  match the input;
- a producer killed mid-transaction is aborted after its timeout, also
  across a broker SIGKILL, and read_committed consumers move past it (the
  LSO advances);
- the broker SIGKILLed while a transaction is in PrepareCommit (held there
  by the `txn.before.markers` failpoint) writes the markers after restart;
- kafka-python's transactional producer with send_offsets_to_transaction
  and read_committed consumers.
kafkajs's transactions are in tests/kafkajs/transactions.js."""
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HERE = Path(__file__).resolve().parent


def create(server, topic, partitions):
    a = AdminClient({"bootstrap.servers": server.bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def consumer(server, isolation, **extra):
    return Consumer({"bootstrap.servers": server.bootstrap, "group.id": "checker",
                     "enable.auto.commit": False, "isolation.level": isolation, **extra})


def read_all(server, topic, partitions, isolation, want=None, timeout=30):
    """Every record the isolation level shows, per partition, read until the
    position reaches the end offset the same isolation level reports (the
    LSO under read_committed), or until `want` records when given."""
    c = consumer(server, isolation)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = {p: [] for p in range(partitions)}
    deadline = time.time() + timeout
    while time.time() < deadline:
        for m in c.consume(500, timeout=0.2):
            assert m.error() is None, m.error()
            got[m.partition()].append(m.value().decode())
        n = sum(len(v) for v in got.values())
        if want is not None:
            if n >= want:
                break
        elif all(tp.offset >= ends[tp.partition] for tp in c.position(tps)):
            break
    c.close()
    return got, ends


def lso(server, topic, partition):
    c = consumer(server, "read_committed")
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


def committed(server, group, topic, partitions):
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                  "isolation.level": "read_committed"})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


class Worker:
    """tests/compat/eos_worker.py as a child process."""

    def __init__(self, server, *args):
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "eos_worker.py"), server.bootstrap, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_ready(self, timeout=60):
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", (line, self.proc.stderr.read()[-3000:]
                                         if self.proc.poll() is not None else "")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stdout.close()
        self.proc.stderr.close()


def test_consume_transform_produce_survives_20_sigkills(server_factory):
    server = server_factory("--override", "group.initial.rebalance.delay.ms=0")
    parts = 3
    create(server, "eos-in", parts)
    create(server, "eos-out", parts)
    rng = random.Random(11)
    # The input keeps growing while the worker is killed and restarted.
    produced = []
    stop = threading.Event()

    def feed():
        p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        n = 0
        while not stop.is_set():
            for _ in range(10):
                p.produce("eos-in", value=str(n).encode(), partition=n % parts)
                produced.append(n)
                n += 1
            p.poll(0)
            time.sleep(0.05)
        assert p.flush(30) == 0

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        for _ in range(20):
            w = Worker(server, "eos-in", "eos-out", "eos-group", "eos-app")
            w.wait_ready()
            time.sleep(rng.uniform(0.2, 1.5))
            w.kill()
    finally:
        stop.set()
        feeder.join()
    total = len(produced)
    ends = {p: len([n for n in produced if n % parts == p]) for p in range(parts)}

    # A last incarnation runs until the committed offsets cover the input.
    w = Worker(server, "eos-in", "eos-out", "eos-group", "eos-app")
    w.wait_ready()
    deadline = time.time() + 120
    while committed(server, "eos-group", "eos-in", parts) != ends:
        assert time.time() < deadline, (committed(server, "eos-group", "eos-in", parts), ends)
        time.sleep(0.5)
    w.kill()

    got, _ = read_all(server, "eos-out", parts, "read_committed")
    for p in range(parts):
        # Exactly once and in input order, per partition.
        assert got[p] == [f"out-{n}" for n in produced if n % parts == p], p
    assert sum(len(v) for v in got.values()) == total
    # Some kills hit an open transaction whose records reached the broker:
    # they are there, aborted (read_uncommitted shows them).
    raw, _ = read_all(server, "eos-out", parts, "read_uncommitted")
    assert sum(len(v) for v in raw.values()) > total


DOOMED = """
import sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "doomed",
              "transaction.timeout.ms": 4000, "socket.timeout.ms": 3000})
p.init_transactions(30)
p.begin_transaction()
for i in range(5):
    p.produce("txn-doomed", value=f"doomed-{i}".encode(), partition=0)
assert p.flush(10) == 0
print("open", flush=True)
time.sleep(3600)
"""


def test_producer_killed_mid_transaction_is_aborted_after_its_timeout(server_factory):
    server = server_factory(
        "--override", "transaction.abort.timed.out.transaction.cleanup.interval.ms=200")
    create(server, "txn-doomed", 1)
    doomed = subprocess.Popen([sys.executable, "-c", DOOMED, server.bootstrap],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert doomed.stdout.readline().strip() == "open", doomed.stderr.read()[-3000:]
    finally:
        doomed.kill()
        doomed.wait(10)
    started = time.time()
    # Another producer commits behind the open transaction.
    after = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "after"})
    after.init_transactions(30)
    after.begin_transaction()
    for i in range(3):
        after.produce("txn-doomed", value=f"after-{i}".encode(), partition=0)
    after.commit_transaction(30)
    if time.time() - started < 3:
        # Still inside the dead producer's timeout: the LSO holds at its
        # first record, so read_committed shows nothing yet.
        assert lso(server, "txn-doomed", 0) == 0
    # The broker dies too: the reloaded coordinator still times it out.
    server.stop(signal.SIGKILL)
    server.start()
    deadline = time.time() + 30
    while lso(server, "txn-doomed", 0) == 0:
        assert time.time() < deadline, "the dead producer's transaction was never aborted"
        time.sleep(0.2)
    got, ends = read_all(server, "txn-doomed", 1, "read_committed", want=3)
    assert got == {0: ["after-0", "after-1", "after-2"]}
    # 5 aborted records, their abort marker, 3 records and their commit marker.
    assert lso(server, "txn-doomed", 0) == 10
    raw, _ = read_all(server, "txn-doomed", 1, "read_uncommitted")
    assert raw[0][:5] == [f"doomed-{i}" for i in range(5)]


def test_broker_killed_in_prepare_commit_writes_the_markers_after_restart(server_factory):
    server = server_factory(env={"SLUICE_FAILPOINTS": "txn.before.markers"})
    create(server, "txn-prepared", 3)
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "prepared"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(9):
        p.produce("txn-prepared", value=f"v{i}".encode(), partition=i % 3)
    # EndTxn answers once PrepareCommit is durable; the markers come after.
    p.commit_transaction(30)
    deadline = time.time() + 30
    while "failpoint txn.before.markers reached" not in server.log():
        assert time.time() < deadline, server.log()
        time.sleep(0.1)
    # No marker yet: read_committed sees nothing on any partition.
    assert [lso(server, "txn-prepared", i) for i in range(3)] == [0, 0, 0]
    server.stop(signal.SIGKILL)
    server.env = None
    server.start()
    want = {i: [f"v{j}" for j in range(i, 9, 3)] for i in range(3)}
    got, _ = read_all(server, "txn-prepared", 3, "read_committed", want=9)
    assert got == want
    assert [lso(server, "txn-prepared", i) for i in range(3)] == [4, 4, 4]
    # The transactional id carries on: a fresh producer commits again.
    q = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "prepared"})
    q.init_transactions(30)
    q.begin_transaction()
    q.produce("txn-prepared", value=b"again", partition=0)
    q.commit_transaction(30)
    got, _ = read_all(server, "txn-prepared", 3, "read_committed", want=10)
    assert got[0] == want[0] + ["again"]


def test_kafka_python_send_offsets_and_read_committed(server_factory):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    server = server_factory("--override", "group.initial.rebalance.delay.ms=0")
    create(server, "kp-in", 2)
    create(server, "kp-out", 2)
    plain = KafkaProducer(bootstrap_servers=server.bootstrap)
    for i in range(6):
        plain.send("kp-in", value=f"in-{i}".encode(), partition=i % 2)
    plain.flush()
    plain.close()

    source = KafkaConsumer("kp-in", bootstrap_servers=server.bootstrap, group_id="kp-eos",
                           enable_auto_commit=False, auto_offset_reset="earliest",
                           isolation_level="read_committed")
    records = []
    deadline = time.time() + 30
    while len(records) < 6:
        assert time.time() < deadline
        for batch in source.poll(timeout_ms=500).values():
            records.extend(batch)
    p = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="kp-eos-app")
    p.init_transactions()
    # An aborted attempt: neither its output nor its offsets count.
    p.begin_transaction()
    for r in records:
        p.send("kp-out", value=b"aborted-" + r.value, partition=r.partition)
    p.send_offsets_to_transaction({KTP("kp-in", 0): OffsetAndMetadata(1, "", -1)}, "kp-eos")
    p.flush()
    p.abort_transaction()
    assert committed(server, "kp-eos", "kp-in", 2) == {0: -1001, 1: -1001}
    # The committed attempt.
    p.begin_transaction()
    for r in records:
        p.send("kp-out", value=b"out-" + r.value, partition=r.partition)
    p.send_offsets_to_transaction({KTP("kp-in", 0): OffsetAndMetadata(3, "", -1),
                                   KTP("kp-in", 1): OffsetAndMetadata(3, "", -1)}, "kp-eos")
    p.commit_transaction()
    p.close()
    source.close()
    assert committed(server, "kp-eos", "kp-in", 2) == {0: 3, 1: 3}

    out = KafkaConsumer(bootstrap_servers=server.bootstrap, isolation_level="read_committed",
                        auto_offset_reset="earliest", enable_auto_commit=False)
    out.assign([KTP("kp-out", 0), KTP("kp-out", 1)])
    got = {0: [], 1: []}
    deadline = time.time() + 30
    while sum(len(v) for v in got.values()) < 6 and time.time() < deadline:
        for tp, batch in out.poll(timeout_ms=500).items():
            got[tp.partition].extend(r.value.decode() for r in batch)
    out.close()
    assert got == {0: ["out-in-0", "out-in-2", "out-in-4"], 1: ["out-in-1", "out-in-3", "out-in-5"]}
