"""sluice-streams' word count example (crates/streams/examples/word_count.rs,
Kafka's WordCountDemo) as real processes against a real `sluice server`,
with confluent-kafka feeding the input and reading the output:

- two instances share the 6 tasks of each sub-topology; the output's
  latest count per word equals a reference count computed here;
- one instance is SIGKILLed mid-stream: the survivor takes its tasks over,
  restores their stores from the changelogs and carries on. Nothing is
  lost (every count reaches the reference) and over-counting is bounded by
  at-least-once: a word is counted twice at most once per occurrence in
  the records after the committed offsets at the time of the kill (input
  lines, and words in the repartition topic)."""
import os
import random
import signal
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = os.environ.get("SLUICETEST_WORD_COUNT",
                         str(ROOT / "target" / "debug" / "examples" / "word_count"))
INPUT, OUTPUT, APP = "streams-plaintext-input", "streams-wordcount-output", "wc-compat"
VOCAB = [f"w{i:02d}" for i in range(40)]


class Instance:
    def __init__(self, server, state_dir):
        assert Path(EXAMPLE).exists(), (
            f"{EXAMPLE} is missing: cargo test --workspace (scripts/test.sh) or cargo build -p sluice-streams --examples builds it")
        self.log = open(state_dir.parent / f"{state_dir.name}.log", "wb")
        self.log_path = Path(self.log.name)
        self.proc = subprocess.Popen(
            [EXAMPLE, "--bootstrap-server", server.bootstrap, "--application-id", APP,
             "--state-dir", str(state_dir),
             # A killed instance leaves the group after 6 s, not 45.
             "--config", "session.timeout.ms=6000", "--config", "heartbeat.interval.ms=1000"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def output(self):
        return self.log_path.read_text(errors="replace")

    def stop(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(60)
        self.log.close()
        return code


def last_state(instance):
    """The state an instance last printed ("state X -> Y" lines), or None."""
    states = [line.rsplit("-> ", 1)[1].strip() for line in instance.output().splitlines()
              if line.startswith("state ") and "-> " in line]
    return states[-1] if states else None


def produce_lines(server, rng, n, reference):
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    for _ in range(n):
        words = [rng.choice(VOCAB) for _ in range(rng.randint(1, 5))]
        reference.update(words)
        p.produce(INPUT, value=" ".join(words).encode())
    assert p.flush(30) == 0


class OutputReader:
    """Follows the output topic: the latest count per word."""

    def __init__(self, server):
        self.c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "wc-reader",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.c.assign([TopicPartition(OUTPUT, p, 0) for p in range(6)])
        self.counts = {}

    def drain(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            self.until("nothing", lambda c: True)
            time.sleep(0.1)

    def until(self, what, cond, timeout=120):
        deadline = time.time() + timeout
        while True:
            for m in self.c.consume(1000, timeout=0.2):
                assert m.error() is None, m.error()
                (count,) = struct.unpack(">q", m.value())  # Kafka's LongSerializer
                self.counts[m.key().decode()] = count
            if cond(self.counts):
                return
            assert time.time() < deadline, f"timed out waiting for {what}"


def committed(server, topic, partitions):
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": APP})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: max(tp.offset, 0) for tp in got}
    finally:
        c.close()


def words_after(server, topic, offsets, value_words):
    """Words in `topic` from `offsets` (per partition) to its end."""
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "wc-audit",
                  "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in offsets}
    c.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
    words = Counter()
    left = sum(max(ends[p] - o, 0) for p, o in offsets.items())
    deadline = time.time() + 60
    while left > 0 and time.time() < deadline:
        for m in c.consume(1000, timeout=0.2):
            assert m.error() is None, m.error()
            words.update(value_words(m))
            left -= 1
    c.close()
    return words


def test_word_count_instances_share_tasks_and_survive_a_sigkill(server_factory, tmp_path):
    server = server_factory("--override", "group.initial.rebalance.delay.ms=0")
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for t in (INPUT, OUTPUT):
        admin.create_topics([NewTopic(t, 6, 1)])[t].result(10)
    rng = random.Random(7)
    reference = Counter()
    produce_lines(server, rng, 2000, reference)

    a = Instance(server, tmp_path / "state-a")
    b = Instance(server, tmp_path / "state-b")
    out = OutputReader(server)
    out.until("the first 2000 lines", lambda c: c == dict(reference))
    # A may count everything before B's join completes: wait for the
    # group to settle with both instances running.
    settle_deadline = time.time() + 60
    while not all(last_state(i) == "Running" for i in (a, b)):
        assert time.time() < settle_deadline, (a.output(), b.output())
        time.sleep(0.2)

    # More input; A dies while it is being processed.
    produce_lines(server, rng, 4000, reference)
    time.sleep(0.3)
    a.stop(signal.SIGKILL)
    repartition = [t for t in admin.list_topics(timeout=10).topics
                   if t.startswith(f"{APP}-") and t.endswith("-repartition")]
    assert len(repartition) == 1, repartition
    # What may be processed twice: records after the committed offsets.
    again = words_after(server, INPUT, committed(server, INPUT, 6),
                        lambda m: m.value().decode().split())
    again += words_after(server, repartition[0], committed(server, repartition[0], 6),
                         lambda m: [m.key().decode()])

    out.until("every count to reach the reference",
              lambda c: all(c.get(w, 0) >= n for w, n in reference.items()), timeout=180)
    out.drain(3)  # anything still in flight lands
    for w, n in reference.items():
        assert n <= out.counts[w] <= n + again[w], (w, n, out.counts[w], again[w])
    assert b.stop(signal.SIGTERM) == 0
    assert "closed (clean: true)" in b.output(), b.output()[-3000:]
    out.c.close()
