"""kafka-python 2.2 against sluice: producer acks modes, an assign()-based
consumer with seek, offsets_for_times, and the admin client."""
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import (InvalidConfigurationError, MessageSizeTooLargeError,
                          TopicAlreadyExistsError, UnknownTopicOrPartitionError)


def admin(server):
    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)


def producer(server, **kw):
    return KafkaProducer(bootstrap_servers=server.bootstrap, **kw)


def consumer(server, **kw):
    # No group: assign() only, nothing committed.
    return KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None,
                         enable_auto_commit=False, **kw)


def create(server, name, partitions=1, configs=None):
    a = admin(server)
    try:
        a.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    finally:
        a.close()


def read_exactly(c, n, timeout=30):
    """Polls until `n` records arrived (no more are expected), then checks
    that nothing else follows."""
    out = []
    deadline = time.time() + timeout
    while len(out) < n and time.time() < deadline:
        for recs in c.poll(timeout_ms=500, max_records=10000).values():
            out.extend(recs)
    assert len(out) == n, f"got {len(out)} of {n} records"
    extra = [r for recs in c.poll(timeout_ms=300).values() for r in recs]
    assert not extra, extra[:3]
    return out


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_producer_acks(server, acks):
    topic = f"acks-{acks}"
    create(server, topic)
    p = producer(server, acks=acks, linger_ms=5)
    n = 2000
    futures = [p.send(topic, key=b"k%d" % i, value=b"acks %s record %d" % (str(acks).encode(), i))
               for i in range(n)]
    p.flush(timeout=30)
    metas = [f.get(timeout=10) for f in futures]  # acks=0: no error either
    if acks == 0:
        assert all(m.offset == -1 for m in metas)
        # kafka-python 2.2.15 resolves an acks=0 send once the request is
        # queued on the connection, but only writes a connection's queue
        # when a request that expects a response goes out on it
        # (KafkaClient.send adds the connection to `_sending` only for
        # undone futures), so closing now would drop everything. Any
        # request with a response flushes the queue: ask for metadata.
        assert p.partitions_for(f"{topic}-flush") is not None
    else:
        assert [m.offset for m in metas] == list(range(n))
    p.close()

    c = consumer(server)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = read_exactly(c, n)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, b"k%d" % i, b"acks %s record %d" % (str(acks).encode(), i)) for i in range(n)]
    c.close()


def test_consumer_assign_and_seek(server):
    topic = "seek"
    create(server, topic, partitions=2)
    p = producer(server, acks="all")
    sent = {0: [], 1: []}
    for i in range(300):
        part = i % 2
        rec = (b"key-%d" % i, b"value-%d" % i * (i % 7 + 1), [("n", b"%d" % i), ("empty", b"")])
        p.send(topic, key=rec[0], value=rec[1], headers=rec[2], partition=part)
        sent[part].append(rec)
    # A null key and a null value.
    p.send(topic, key=None, value=b"no key", partition=0)
    sent[0].append((None, b"no key", []))
    p.send(topic, key=b"tombstone", value=None, partition=0)
    sent[0].append((b"tombstone", None, []))
    p.flush(timeout=30)
    p.close()

    c = consumer(server, max_poll_records=10000)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    c.assign([tp0, tp1])
    assert set(c.assignment()) == {tp0, tp1}
    c.seek_to_beginning()
    got = read_exactly(c, 302)
    by_part = {0: [], 1: []}
    for r in got:
        by_part[r.partition].append(r)
    for part in (0, 1):
        assert [r.offset for r in by_part[part]] == list(range(len(sent[part])))
        assert [(r.key, r.value, list(r.headers)) for r in by_part[part]] == sent[part]
    assert c.position(tp0) == 152 and c.position(tp1) == 150

    # Seek into the middle of one partition: exactly the records from there.
    c.seek(tp0, 100)
    c.seek(tp1, 150)  # the end: nothing
    got = read_exactly(c, 52)
    assert [(r.partition, r.offset, r.key, r.value) for r in got] == [
        (0, 100 + i, k, v) for i, (k, v, _) in enumerate(sent[0][100:])]

    # Back to the start of one partition only.
    c.seek_to_beginning(tp1)
    got = read_exactly(c, 150)
    assert [r.offset for r in got] == list(range(150)) and {r.partition for r in got} == {1}

    assert c.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
    assert c.end_offsets([tp0, tp1]) == {tp0: 152, tp1: 150}
    # seek_to_end, then a new record: exactly that one arrives. (position()
    # right after a seek_to_end spins in kafka-python 2.2.15: it waits for
    # the ListOffsets answer without polling the network; poll() resolves it.)
    c.seek_to_end(tp0)
    assert not c.poll(timeout_ms=500)
    p = producer(server, acks="all")
    p.send(topic, key=b"late", value=b"after seek_to_end", partition=0).get(timeout=10)
    p.close()
    got = read_exactly(c, 1)
    assert [(r.partition, r.offset, r.key) for r in got] == [(0, 152, b"late")]
    assert c.position(tp0) == 153
    c.close()


def test_offsets_for_times(server):
    topic = "times"
    create(server, topic)
    base = (int(time.time()) - 3600) * 1000
    p = producer(server, acks="all")
    for i in range(20):
        p.send(topic, value=b"t%d" % i, timestamp_ms=base + i * 1000, partition=0)
    p.flush(timeout=30)
    p.close()

    c = consumer(server)
    tp = TopicPartition(topic, 0)
    got = c.offsets_for_times({tp: base})
    assert (got[tp].offset, got[tp].timestamp) == (0, base)
    got = c.offsets_for_times({tp: base + 5500})
    assert (got[tp].offset, got[tp].timestamp) == (6, base + 6000)
    got = c.offsets_for_times({tp: base - 10_000})
    assert (got[tp].offset, got[tp].timestamp) == (0, base)
    got = c.offsets_for_times({tp: base + 19_000})
    assert (got[tp].offset, got[tp].timestamp) == (19, base + 19_000)
    # Past the last record: no offset.
    assert c.offsets_for_times({tp: base + 20_000}) == {tp: None}
    # And the consumer reads from the offset it was given.
    c.assign([tp])
    c.seek(tp, c.offsets_for_times({tp: base + 12_000})[tp].offset)
    got = read_exactly(c, 8)
    assert [(r.offset, r.timestamp, r.value) for r in got] == [
        (i, base + i * 1000, b"t%d" % i) for i in range(12, 20)]
    c.close()


def test_admin_create_topics_with_configs(server):
    a = admin(server)
    r = a.create_topics([
        NewTopic("small-records", 3, 1,
                 topic_configs={"max.message.bytes": "2000", "retention.ms": "86400000",
                                "cleanup.policy": "delete"}),
        NewTopic("plain", 1, 1),
    ])
    assert all(e == 0 for _, e, *_ in r.topic_errors), r
    assert {"small-records", "plain"} <= set(a.list_topics())
    desc = {t["topic"]: t for t in a.describe_topics(["small-records", "plain"])}
    assert len(desc["small-records"]["partitions"]) == 3
    assert len(desc["plain"]["partitions"]) == 1

    with pytest.raises(TopicAlreadyExistsError):
        a.create_topics([NewTopic("plain", 1, 1)])
    with pytest.raises(InvalidConfigurationError):
        a.create_topics([NewTopic("bad-config", 1, 1, topic_configs={"retention.ms": "abc"})])
    # validate_only creates nothing.
    a.create_topics([NewTopic("dry-run", 2, 1)], validate_only=True)
    assert "dry-run" not in a.list_topics()
    assert "bad-config" not in a.list_topics()
    a.close()

    # The config is in force: a record over max.message.bytes is refused,
    # one under it is accepted.
    p = producer(server, acks="all", retries=0)
    with pytest.raises(MessageSizeTooLargeError):
        p.send("small-records", value=b"x" * 5000, partition=0).get(timeout=10)
    assert p.send("small-records", value=b"x" * 500, partition=0).get(timeout=10).offset == 0
    assert p.send("plain", value=b"x" * 5000).get(timeout=10).offset == 0
    p.close()


def test_admin_delete_topics(server):
    create(server, "doomed", partitions=2)
    p = producer(server, acks="all")
    p.send("doomed", value=b"v", partition=1).get(timeout=10)
    p.close()
    a = admin(server)
    assert "doomed" in a.list_topics()
    r = a.delete_topics(["doomed"])
    assert [e for _, e in r.topic_error_codes] == [0], r
    assert "doomed" not in a.list_topics()
    # Each partition folder is renamed `<tp>.<id>-delete` at once and
    # removed after log.segment.delete.delay.ms (60 s), as Kafka does.
    left = [p.name for p in server.data_dir.iterdir() if p.name.startswith("doomed-")]
    assert all(n.endswith("-delete") for n in left), left
    with pytest.raises(UnknownTopicOrPartitionError):
        a.delete_topics(["doomed"])
    # The name can be used again, and starts empty.
    a.create_topics([NewTopic("doomed", 1, 1)])
    a.close()
    c = consumer(server)
    tp = TopicPartition("doomed", 0)
    assert c.end_offsets([tp]) == {tp: 0}
    c.close()


def test_admin_describe_configs(server):
    create(server, "described", configs={"retention.ms": "12345", "cleanup.policy": "compact"})
    a = admin(server)
    [r] = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "described")])
    [(err, _msg, rtype, name, entries)] = r.resources
    assert err == 0 and name == "described"
    configs = {e[0]: e[1] for e in entries}
    assert configs["retention.ms"] == "12345"
    assert configs["cleanup.policy"] == "compact"
    assert configs["segment.bytes"] == str(1024 ** 3)  # a default
    [r] = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "described",
                                             configs={"retention.ms": None})])
    assert [e[0] for e in r.resources[0][4]] == ["retention.ms"]
    a.close()


def test_admin_create_partitions(server):
    create(server, "growing", partitions=2)
    a = admin(server)
    r = a.create_partitions({"growing": NewPartitions(total_count=5)})
    assert [e[1] for e in r.topic_errors] == [0], r
    [t] = a.describe_topics(["growing"])
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2, 3, 4]
    a.close()
    p = producer(server, acks="all")
    assert p.send("growing", value=b"new", partition=4).get(timeout=10).partition == 4
    p.close()
    c = consumer(server)
    tp = TopicPartition("growing", 4)
    c.assign([tp])
    c.seek_to_beginning(tp)
    assert [r.value for r in read_exactly(c, 1)] == [b"new"]
    c.close()


def test_old_protocol_client_lists_all_topics(server):
    """kafka-python pinned to Kafka 0.9's protocol asks for all topics with
    Metadata v0, where "all" is an empty list (not null)."""
    create(server, "old-1")
    create(server, "old-2", partitions=2)
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, api_version=(0, 9), group_id=None)
    assert c.topics() == {"old-1", "old-2"}
    assert c.partitions_for_topic("old-2") == {0, 1}
    c.close()
