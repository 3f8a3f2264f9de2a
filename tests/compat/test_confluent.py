"""confluent-kafka (librdkafka 2.16) against sluice: 100,000 messages over
6 partitions through produce_batch and an assign()-based consumer, the
admin client's list_offsets, and topic administration."""
import logging
import time

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException,
                             Producer, TopicCollection, TopicPartition)
from confluent_kafka.admin import (AdminClient, ConfigResource, NewTopic, OffsetSpec,
                                   ResourceType)

import wire

# Requests that only a consumer group member sends.
GROUP_REQUESTS = ("OffsetFetch", "OffsetCommit", "JoinGroup", "SyncGroup", "Heartbeat",
                  "LeaveGroup", "ConsumerGroupHeartbeat")
FIND_COORDINATOR = 10


def result(future, timeout=30):
    return future.result(timeout=timeout)


def admin(server):
    return AdminClient({"bootstrap.servers": server.bootstrap})


def create(server, name, partitions=1, config=None):
    a = admin(server)  # kept alive until the future resolves
    fs = a.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    fs[name].result(timeout=30)


def producer(server, **conf):
    return Producer({"bootstrap.servers": server.bootstrap, "acks": "all",
                     "linger.ms": 5, **conf})


def consumer(server, **conf):
    # librdkafka insists on a group.id, but with assign() at explicit offsets
    # and no commits it never talks to a group coordinator (checked below).
    return Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused",
                     "enable.auto.commit": False, "enable.auto.offset.store": False,
                     "auto.offset.reset": "error", **conf})


def produce_all(p, topic, messages, chunk=20_000):
    failed = []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)

    for i in range(0, len(messages), chunk):
        batch = messages[i:i + chunk]
        assert p.produce_batch(topic, batch, on_delivery=on_delivery) == len(batch)
        p.poll(0)
    assert p.flush(60) == 0
    assert not failed, failed[:5]


def consume_all(c, n, timeout=60):
    out = []
    deadline = time.time() + timeout
    while len(out) < n and time.time() < deadline:
        for m in c.consume(num_messages=10_000, timeout=0.5):
            assert m.error() is None, m.error()
            out.append(m)
    assert len(out) == n, f"got {len(out)} of {n}"
    extra = c.consume(num_messages=10, timeout=0.5)
    assert not [m for m in extra if m.error() is None], "more messages than produced"
    return out


def test_100k_over_6_partitions(server):
    topic = "bulk"
    n, keys = 100_000, 1000
    create(server, topic, partitions=6)
    messages = [{"key": b"key-%d" % (i % keys), "value": b"message %d" % i} for i in range(n)]
    p = producer(server, **{"queue.buffering.max.messages": 200_000,
                            "batch.num.messages": 10_000})
    produce_all(p, topic, messages)

    c = consumer(server)
    c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in range(6)])
    got = consume_all(c, n)
    c.close()

    # Every message exactly once.
    values = sorted(int(m.value().split()[1]) for m in got)
    assert values == list(range(n))
    by_part = {}
    for m in got:
        by_part.setdefault(m.partition(), []).append(m)
    # Keys spread over all six partitions; each partition's offsets 0..len.
    assert sorted(by_part) == list(range(6))
    for part, ms in by_part.items():
        assert [m.offset() for m in ms] == list(range(len(ms))), part
        assert len(ms) > n // 20, (part, len(ms))
    # One key, one partition, in the order produced.
    key_part, key_seq = {}, {}
    for part, ms in by_part.items():
        for m in ms:
            assert key_part.setdefault(m.key(), part) == part, m.key()
            key_seq.setdefault(m.key(), []).append(int(m.value().split()[1]))
    assert len(key_part) == keys
    assert all(seq == sorted(seq) for seq in key_seq.values())


def test_assign_consumer_sends_no_group_requests(server):
    """With assign() at explicit offsets and no commits, librdkafka must not
    need the group coordinator: no OffsetFetch, JoinGroup, OffsetCommit...
    FindCoordinator is another matter: with a group.id set, librdkafka's
    group handle goes to state query-coord even for an assign()-only
    consumer, and while the broker does not advertise FindCoordinator it
    finds no broker to ask ("no broker available for coordinator query")
    and sends nothing; once the API exists it may ask, harmlessly."""
    create(server, "nogroup", partitions=2)
    p = producer(server)
    for i in range(10):
        p.produce("nogroup", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0

    lines = []

    class Capture(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    log = logging.getLogger("sluice-test-rdkafka")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(Capture())
    c = consumer(server, debug="protocol,cgrp", logger=log)
    c.assign([TopicPartition("nogroup", 0, OFFSET_BEGINNING),
              TopicPartition("nogroup", 1, OFFSET_BEGINNING)])
    got = consume_all(c, 10)
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(10))
    c.close()
    sent = [line for line in lines if "Sent " in line]
    assert any("FetchRequest" in line for line in sent), sent[:20]
    group = [line for line in sent if any(f"Sent {r}Request" in line for r in GROUP_REQUESTS)]
    assert not group, group
    if FIND_COORDINATOR not in wire.advertised(server):
        assert not [line for line in sent if "FindCoordinator" in line]


def test_list_offsets(server):
    topic = "offsets"
    create(server, topic, partitions=2)
    base = (int(time.time()) - 3600) * 1000
    p = producer(server)
    # Partition 0: ten records one second apart, the largest timestamp in
    # the middle; partition 1 stays empty.
    stamps = [base + i * 1000 for i in range(10)]
    stamps[6] = base + 50_000
    for i, ts in enumerate(stamps):
        p.produce(topic, value=b"r%d" % i, partition=0, timestamp=ts)
    assert p.flush(30) == 0

    a = admin(server)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    def ask(spec, tp=tp0):
        return result(a.list_offsets({tp: spec})[tp])

    assert ask(OffsetSpec.earliest()).offset == 0
    assert ask(OffsetSpec.latest()).offset == 10
    top = ask(OffsetSpec.max_timestamp())
    assert (top.offset, top.timestamp) == (6, base + 50_000)
    hit = ask(OffsetSpec.for_timestamp(base + 2500))
    assert (hit.offset, hit.timestamp) == (3, base + 3000)
    hit = ask(OffsetSpec.for_timestamp(base))
    assert (hit.offset, hit.timestamp) == (0, base)
    # Later than every record but one in the middle: that one.
    hit = ask(OffsetSpec.for_timestamp(base + 20_000))
    assert (hit.offset, hit.timestamp) == (6, base + 50_000)
    # Later than every record: no offset (-1).
    assert ask(OffsetSpec.for_timestamp(base + 60_000)).offset == -1
    # The empty partition.
    assert ask(OffsetSpec.earliest(), tp1).offset == 0
    assert ask(OffsetSpec.latest(), tp1).offset == 0
    # Several partitions in one call.
    fs = a.list_offsets({tp0: OffsetSpec.latest(), tp1: OffsetSpec.latest()})
    assert {tp.partition: result(f).offset for tp, f in fs.items()} == {0: 10, 1: 0}
    # An unknown partition is an error for that partition.
    with pytest.raises(KafkaException):
        result(a.list_offsets({TopicPartition("no-such-topic", 0): OffsetSpec.latest()})[
            TopicPartition("no-such-topic", 0)], timeout=15)


def test_admin_topics(server):
    a = admin(server)
    fs = a.create_topics([NewTopic("alpha", 3, 1, config={"retention.ms": "3600000"}),
                          NewTopic("beta", 1, 1)])
    for f in fs.values():
        f.result(timeout=30)
    assert {"alpha", "beta"} <= set(a.list_topics(timeout=10).topics)

    # Errors per topic.
    fs = a.create_topics([NewTopic("alpha", 1, 1)])
    with pytest.raises(KafkaException) as e:
        fs["alpha"].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    fs = a.create_topics([NewTopic("gamma", 1, 1, config={"retention.ms": "abc"})])
    with pytest.raises(KafkaException) as e:
        fs["gamma"].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    fs = a.create_topics([NewTopic("delta", 1, 3)])
    with pytest.raises(KafkaException) as e:
        fs["delta"].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    fs = a.create_topics([NewTopic("dry", 4, 1)], validate_only=True)
    fs["dry"].result(timeout=30)
    assert "dry" not in a.list_topics(timeout=10).topics

    # describe_topics: partitions, leader, replicas, topic id.
    fs = a.describe_topics(TopicCollection(["alpha", "beta"]))
    desc = {name: f.result(timeout=30) for name, f in fs.items()}
    assert [p.id for p in desc["alpha"].partitions] == [0, 1, 2]
    assert len(desc["beta"].partitions) == 1
    for d in desc.values():
        assert not d.is_internal
        assert str(d.topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA")
        for part in d.partitions:
            assert part.leader is not None and [r.id for r in part.replicas] == [part.leader.id]
            assert [r.id for r in part.isr] == [part.leader.id]
    assert desc["alpha"].topic_id != desc["beta"].topic_id
    fs = a.describe_topics(TopicCollection(["no-such-topic"]))
    with pytest.raises(KafkaException) as e:
        fs["no-such-topic"].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # delete_topics
    fs = a.delete_topics(["alpha", "beta"], operation_timeout=10)
    for f in fs.values():
        f.result(timeout=30)
    topics = a.list_topics(timeout=10).topics
    assert "alpha" not in topics and "beta" not in topics
    fs = a.delete_topics(["alpha"], operation_timeout=10)
    with pytest.raises(KafkaException) as e:
        fs["alpha"].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_describe_configs(server):
    create(server, "configured", config={"retention.ms": "7200000",
                                         "cleanup.policy": "compact"})
    a = admin(server)
    res = ConfigResource(ResourceType.TOPIC, "configured")
    configs = result(a.describe_configs([res])[res])
    assert configs["retention.ms"].value == "7200000"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == str(1024 ** 3)
    assert configs["segment.bytes"].is_default
    missing = ConfigResource(ResourceType.TOPIC, "no-such-topic")
    with pytest.raises(KafkaException):
        result(a.describe_configs([missing])[missing])
