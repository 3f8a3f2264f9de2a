"""Jepsen-style workload and checks for a Sluice cluster (issue #13):
idempotent acks=all producers (confluent-kafka in a thread, sluice-client
through `sluice produce`), a confluent-kafka consumer group with manual
commits, and the checks of Jepsen's Kafka workload over the final log.
Used by test_cluster_failover.py, test_network_partition.py and chaos.py.
"""
import subprocess
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from conftest import BIN

TOPIC = "jepsen"
PARTITIONS = 3
GROUP = "jepsen-group"


class ConfluentProducer(threading.Thread):
    """Sends c-0, c-1, ... until stopped; keeps what was acknowledged."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 5, "message.timeout.ms": 120_000, "log_level": 0})
        self.stop = threading.Event()
        self.acked = []  # (partition, offset, value)
        self.failed = []
        self.sent = 0

    def report(self, err, msg):
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.failed.append(str(err))

    def run(self):
        while not self.stop.is_set():
            value = b"c-%d" % self.sent
            try:
                self.p.produce(TOPIC, key=b"k%d" % (self.sent % 10), value=value, on_delivery=self.report)
                self.sent += 1
            except BufferError:
                pass
            self.p.poll(0.002)
        self.p.flush(120)


class SluiceProducer(threading.Thread):
    """`sluice produce` (sluice-client, idempotent, acks=all) fed s-0,
    s-1, ... on stdin until stopped; it exits 0 only when every line was
    acknowledged."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.proc = subprocess.Popen(
            [BIN, "produce", "--topic", TOPIC, "--bootstrap-server", bootstrap, "--verbose"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.stop = threading.Event()
        self.sent = 0

    def run(self):
        while not self.stop.is_set():
            self.proc.stdin.write(b"s-%d\n" % self.sent)
            self.proc.stdin.flush()
            self.sent += 1
            time.sleep(0.004)
        self.proc.stdin.close()

    def finish(self):
        self.stop.set()
        self.join()
        code = self.proc.wait(timeout=180)
        return code, self.proc.stderr.read().decode(errors="replace")


class GroupConsumer(threading.Thread):
    """A consumer group member that polls, commits every 100 records
    (synchronously) and keeps what it polled and which commits were
    acknowledged."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                           "enable.auto.commit": False, "auto.offset.reset": "earliest",
                           "session.timeout.ms": 10_000, "log_level": 0})
        self.stop = threading.Event()
        self.polled = []  # (partition, offset, value)
        self.backwards = []
        self.committed = {}  # partition -> highest acknowledged commit
        self.commit_errors = 0
        self.last = {}

    def on_assign(self, _consumer, partitions):
        # A rebalance may rewind to the committed offsets: polls are
        # checked for order within one assignment.
        for tp in partitions:
            self.last.pop(tp.partition, None)

    def run(self):
        self.c.subscribe([TOPIC], on_assign=self.on_assign)
        since_commit = 0
        while not self.stop.is_set():
            msg = self.c.poll(0.2)
            if msg is None or msg.error():
                continue
            p, o = msg.partition(), msg.offset()
            if p in self.last and o <= self.last[p]:
                self.backwards.append((p, self.last[p], o))
            self.last[p] = o
            self.polled.append((p, o, msg.value()))
            since_commit += 1
            if since_commit >= 100:
                since_commit = 0
                try:
                    for tp in self.c.commit(asynchronous=False) or []:
                        if tp.error is None and tp.offset >= 0:
                            self.committed[tp.partition] = max(self.committed.get(tp.partition, -1), tp.offset)
                except KafkaException:
                    self.commit_errors += 1
        self.c.close()


def read_log(bootstrap):
    """Every partition's records from the log start to the high watermark:
    {partition: {offset: value}}."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "jepsen-reader",
                  "enable.auto.commit": False, "log_level": 0})
    out = {}
    for p in range(PARTITIONS):
        _, high = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING)])
        records = {}
        deadline = time.time() + 60
        while len(records) < high and time.time() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            assert msg.offset() not in records, f"offset {msg.offset()} of partition {p} read twice"
            records[msg.offset()] = msg.value()
        assert len(records) == high, f"partition {p}: read {len(records)} of {high} records"
        out[p] = records
    c.close()
    return out


def check(cluster, confluent, sluice=None, group=None):
    """Jepsen's checks over the final log; returns a one-line summary.

    - no record twice (idempotent producers across failovers);
    - every acknowledged record, at the offset it was acknowledged at;
    - every line sluice-client acknowledged (it exited 0);
    - what the group polled at an offset is what the log holds there;
    - polls move forward within an assignment;
    - acknowledged commits survived."""
    log = read_log(cluster.bootstrap)
    values = [v for records in log.values() for v in records.values()]
    assert len(values) == len(set(values)), "duplicates in the log"
    assert not confluent.failed, confluent.failed[:5]
    lost = [(p, o, v) for p, o, v in confluent.acked if log[p].get(o) != v]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {lost[:5]}"
    if sluice is not None:
        present = set(values)
        missing = [i for i in range(sluice.sent) if b"s-%d" % i not in present]
        assert not missing, f"{len(missing)} of sluice-client's acknowledged records missing, e.g. {missing[:5]}"
    if group is not None:
        diverged = [(p, o, v) for p, o, v in group.polled if log[p].get(o) != v]
        assert not diverged, f"offsets holding two records: {diverged[:5]}"
        assert not group.backwards, f"polls going backwards: {group.backwards[:5]}"
        reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "log_level": 0})
        committed = {tp.partition: tp.offset for tp in
                     reader.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)}
        reader.close()
        for p, offset in group.committed.items():
            assert committed[p] >= offset, f"partition {p}: committed {committed[p]}, acknowledged {offset}"
    return (f"log {len(values)} records; acked: confluent {len(confluent.acked)}"
            + (f", sluice {sluice.sent}" if sluice else "")
            + (f"; polled {len(group.polled)}, commits {sum(1 for _ in group.committed)} partitions, "
               f"commit errors {group.commit_errors}" if group else ""))
