"""Issue #9: the metadata log never loses a topic.

The reproduction: a broker run with shortened roll and retention timers
(`log.roll.ms=1000 log.retention.ms=3000 log.retention.check.interval.ms=1000`),
topics created at different times, records produced to topics that keep
their data forever (`retention.ms=-1`), a wait past retention, then a
restart without the overrides. Before the fix the metadata log got topic
retention and start-up deleted every partition the replayed metadata no
longer named. Now every topic and record must still be there, whether the
metadata log only grew or was snapshotted and had its prefix dropped, and
whether the broker stopped cleanly or was killed.
"""
import signal
import time
from pathlib import Path

from confluent_kafka import (OFFSET_BEGINNING, Consumer, Producer, TopicCollection,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from conftest import Server

SHORT_LOG = ["--override", "log.roll.ms=1000",
             "--override", "log.retention.ms=3000",
             "--override", "log.retention.check.interval.ms=1000"]
# Snapshots every second when the metadata changed, a metadata segment per
# second, and old snapshots (with the log below the next one) gone after 2 s.
SHORT_METADATA = ["--override", "metadata.log.segment.ms=1000",
                  "--override", "metadata.log.max.snapshot.interval.ms=1000",
                  "--override", "metadata.max.retention.ms=2000"]
PARTITIONS = 2
PER_TOPIC = 500
KEEP = {"retention.ms": "-1"}


def admin(server):
    return AdminClient({"bootstrap.servers": server.bootstrap})


def create(server, names):
    a = admin(server)  # kept alive until the results are in
    fs = a.create_topics([NewTopic(n, PARTITIONS, 1, config=KEEP) for n in names])
    for f in fs.values():
        f.result(timeout=30)


def produce(server, topic):
    """PER_TOPIC acknowledged records (acks=all); returns their values."""
    acked, failed = set(), []

    def on_delivery(err, msg):
        if err is None:
            acked.add(msg.value())
        else:
            failed.append(err)

    p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all",
                  "linger.ms": 5, "log_level": 0})
    for i in range(PER_TOPIC):
        p.produce(topic, key=b"k%d" % i, value=b"%s-%d" % (topic.encode(), i),
                  on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(60) == 0
    assert not failed, failed[:3]
    assert len(acked) == PER_TOPIC
    return acked


def describe(server):
    """{topic: topic_id} of the non-internal topics."""
    a = admin(server)
    names = [t for t in a.list_topics(timeout=10).topics if not t.startswith("__")]
    if not names:
        return {}
    return {n: str(f.result(timeout=30).topic_id)
            for n, f in a.describe_topics(TopicCollection(names)).items()}


def consume_all(server, topic):
    """Every value in the topic, read from offset 0."""
    a = admin(server)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    starts = {tp.partition: f.result(timeout=30).offset
              for tp, f in a.list_offsets({tp: OffsetSpec.earliest() for tp in tps}).items()}
    ends = {tp.partition: f.result(timeout=30).offset
            for tp, f in a.list_offsets({tp: OffsetSpec.latest() for tp in tps}).items()}
    assert all(s == 0 for s in starts.values()), starts
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "log_level": 0})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out = []
    need = sum(ends.values())
    deadline = time.time() + 60
    while len(out) < need and time.time() < deadline:
        for m in c.consume(num_messages=1000, timeout=0.5):
            assert m.error() is None, m.error()
            out.append(m.value())
    c.close()
    assert len(out) == need, (topic, len(out), ends)
    return set(out)


def metadata_dir(server):
    return Path(server.data_dir) / "__cluster_metadata-0"


def files(folder, suffix):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(suffix))


def wait_for(cond, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def log_text(server):
    return server.log_path.read_text(errors="replace")


def create_over_time(server, rounds, gap):
    """Creates two topics per round, `gap` seconds apart, and fills them."""
    acked = {}
    for _ in range(rounds):
        r = len(describe(server))
        names = [f"t{r}-a", f"t{r}-b"]
        create(server, names)
        for n in names:
            acked[n] = produce(server, n)
        time.sleep(gap)
    return acked


def restart_plain(server, sig):
    """Stops with `sig` and starts again without any override."""
    server.stop(sig)
    server.extra_args = []
    server.start()


def assert_everything_kept(server, acked, ids):
    assert describe(server) == ids
    for topic, values in acked.items():
        assert consume_all(server, topic) == values, topic
    text = log_text(server)
    assert "deleting log of a topic the metadata does not have" not in text
    assert "deleting partition folder" not in text
    assert "stray partition folder" not in text
    assert "panicked" not in text


def test_the_reproduction_keeps_every_topic_and_record(tmp_path):
    server = Server(tmp_path / "data", SHORT_LOG).start()
    try:
        acked = create_over_time(server, rounds=1, gap=1.2)
        # Restarted with the same overrides: the folder now exists when the
        # data folder is opened, so it is opened with the broker's defaults.
        server.restart(signal.SIGTERM)
        acked.update(create_over_time(server, rounds=3, gap=1.2))
        ids = describe(server)
        assert set(ids) == set(acked)
        # Past retention, several retention passes.
        time.sleep(5)
        segments = files(metadata_dir(server), ".log")
        assert "00000000000000000000.log" in segments, segments
        restart_plain(server, signal.SIGTERM)
        assert_everything_kept(server, acked, ids)
        assert "loaded metadata" in log_text(server)
        assert files(metadata_dir(server), ".log")[0] == "00000000000000000000.log"
    finally:
        server.stop()


def snapshot_run(tmp_path, sig):
    server = Server(tmp_path / "data", SHORT_LOG + SHORT_METADATA).start()
    try:
        acked = create_over_time(server, rounds=4, gap=1.3)
        ids = describe(server)
        assert set(ids) == set(acked)
        meta = metadata_dir(server)
        # Snapshots were taken and the log below the oldest one kept was
        # dropped.
        wait_for(lambda: "00000000000000000000.log" not in files(meta, ".log")
                 and len(files(meta, ".checkpoint")) >= 2,
                 "metadata snapshots and a dropped log prefix")
        text = log_text(server)
        assert "created metadata snapshot" in text
        assert "deleted metadata snapshot and the log below the next one" in text
        time.sleep(3)  # more retention passes over the topics
        restart_plain(server, sig)
        assert_everything_kept(server, acked, ids)
        # Start-up read the newest snapshot, then the log after it.
        loaded = [l for l in log_text(server).splitlines() if "loaded metadata" in l]
        assert loaded and ".checkpoint" in loaded[-1], loaded[-1:]
        # And a second plain restart agrees.
        restart_plain(server, signal.SIGTERM)
        assert_everything_kept(server, acked, ids)
    finally:
        server.stop()


def test_snapshots_and_a_dropped_prefix_keep_every_topic(tmp_path):
    snapshot_run(tmp_path, signal.SIGTERM)


def test_snapshots_and_a_dropped_prefix_survive_sigkill(tmp_path):
    snapshot_run(tmp_path, signal.SIGKILL)


def test_an_unknown_partition_folder_is_kept_as_a_stray(tmp_path):
    server = Server(tmp_path / "data", []).start()
    try:
        create(server, ["known"])
        acked = produce(server, "known")
        server.stop()
        # A partition folder the metadata never heard of, with data in it.
        src = Path(server.data_dir) / "known-0"
        ghost = Path(server.data_dir) / "ghost-3"
        ghost.mkdir()
        for f in src.iterdir():
            if f.name != "partition.metadata":
                (ghost / f.name).write_bytes(f.read_bytes())
        size = sum(f.stat().st_size for f in ghost.iterdir())
        server.start()
        assert consume_all(server, "known") == acked
        assert not ghost.exists()
        strays = [p for p in Path(server.data_dir).iterdir()
                  if p.name.startswith("ghost-3.") and p.name.endswith("-stray")]
        assert len(strays) == 1, list(Path(server.data_dir).iterdir())
        assert sum(f.stat().st_size for f in strays[0].iterdir()) == size
        text = log_text(server)
        assert "stray partition folder renamed aside and kept" in text
        assert "ghost-3" in text
        assert "ghost" not in describe(server)
        # Still there after another restart.
        server.restart()
        assert strays[0].exists()
    finally:
        server.stop()
