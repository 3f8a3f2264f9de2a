"""Internal topics are the broker's: clients cannot produce to
`__consumer_offsets`, cannot create or delete internal topics, never see
`__cluster_metadata`, and Produce never creates a topic (Kafka creates
topics on Metadata requests only). Each case is checked with real clients
and raw requests; the broker keeps serving and, after a restart, nothing
that was acknowledged is lost."""
import struct
import subprocess

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

import wire

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_AUTHORIZATION_FAILED = 29
INVALID_REQUEST = 42


def raw(server, request, version, correlation_id=11):
    """Sends one kafka-python protocol request, returns the decoded response."""
    body = request.encode()
    with wire.connect(server) as s:
        s.sendall(wire.frame(wire.header(request.API_KEY, version, correlation_id) + body))
        resp = wire.recv_frame(s)
    (cid,) = struct.unpack_from(">i", resp, 0)
    assert cid == correlation_id
    return request.RESPONSE_TYPE.decode(resp[4:])


def produce_raw(server, topic, value=b"v", version=8):
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    b.append(timestamp=None, key=b"k", value=value)
    b.close()
    req = ProduceRequest[version](
        transactional_id=None, required_acks=1, timeout=5000,
        topics=[(topic, [(0, b.buffer())])])
    resp = raw(server, req, version)
    (_, partitions) = resp.topics[0]
    return partitions[0]


def topic_names_in_metadata(server, topics=None):
    req = MetadataRequest[4](topics=topics, allow_auto_topic_creation=True)
    resp = raw(server, req, 4)
    return {t[1]: t[0] for t in resp.topics}  # name -> error code


def delivered(server, topic, values):
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
    errors = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(15) == 0
    return errors


def read_all(server, topic, expected):
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "reader",
                  "enable.auto.commit": False})
    c.assign([CkTopicPartition(topic, 0, 0)])
    got = []
    try:
        while len(got) < expected:
            m = c.poll(10)
            assert m is not None, f"only {len(got)} of {expected} records"
            assert m.error() is None, m.error()
            got.append(m.value())
    finally:
        c.close()
    return got


def test_clients_cannot_touch_internal_topics(server_factory):
    server = server_factory("--override", "offsets.topic.num.partitions=3")
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(10)
    assert delivered(server, "orders", [b"a", b"b", b"c"]) == [None] * 3

    # A consumer group commit makes the broker create __consumer_offsets
    # with its own configs.
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g1",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe(["orders"])
    seen = 0
    while seen < 3:
        m = c.poll(10)
        assert m is not None and m.error() is None
        seen += 1
    c.commit(asynchronous=False)
    c.close()
    md = admin.list_topics(timeout=10)
    assert "__consumer_offsets" in md.topics
    assert len(md.topics["__consumer_offsets"].partitions) == 3
    assert "__cluster_metadata" not in md.topics

    # Produce to __consumer_offsets: Kafka's INVALID_TOPIC_EXCEPTION, via
    # librdkafka and raw; nothing is appended.
    errors = delivered(server, "__consumer_offsets", [b"garbage"])
    assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_EXCEPTION, errors
    p = produce_raw(server, "__consumer_offsets")
    assert p[1] == INVALID_TOPIC_EXCEPTION, p

    # CreateTopics of any internal topic: INVALID_REQUEST, Kafka's message.
    for name in ["__consumer_offsets", "__transaction_state", "__cluster_metadata"]:
        with pytest.raises(KafkaException) as e:
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
        err = e.value.args[0]
        assert err.code() == KafkaError.INVALID_REQUEST, err
        assert f"Creation of internal topic {name} is prohibited." in err.str()

    # DeleteTopics and CreatePartitions on __consumer_offsets are refused.
    with pytest.raises(KafkaException) as e:
        admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        admin.create_partitions([NewPartitions("__consumer_offsets", 10)])[
            "__consumer_offsets"].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert len(admin.list_topics(timeout=10).topics["__consumer_offsets"].partitions) == 3

    # The broker still serves, and after a restart the group's offsets and
    # the records are intact.
    server.restart()
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g1"})
    committed = c.committed([CkTopicPartition("orders", 0)], timeout=10)
    c.close()
    assert committed[0].offset == 3
    assert read_all(server, "orders", 3) == [b"a", b"b", b"c"]


def test_cluster_metadata_is_invisible(server):
    # kcat's metadata listing does not show it; asking for it by name gets
    # "unknown topic" and does not create it.
    out = subprocess.run(["kcat", "-b", server.bootstrap, "-L", "-J"],
                         capture_output=True, text=True, timeout=30, check=True)
    assert "__cluster_metadata" not in out.stdout
    assert topic_names_in_metadata(server, ["__cluster_metadata"]) == {
        "__cluster_metadata": UNKNOWN_TOPIC_OR_PARTITION}
    assert "__cluster_metadata" not in topic_names_in_metadata(server)
    # Produce and Fetch by name answer as if it did not exist.
    assert produce_raw(server, "__cluster_metadata")[1] == UNKNOWN_TOPIC_OR_PARTITION
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "peek",
                  "enable.partition.eof": True})
    c.assign([CkTopicPartition("__cluster_metadata", 0, 0)])
    m = c.poll(5)
    c.close()
    assert m is None or m.error() is not None, "a record of the metadata log leaked"


def test_produce_never_creates_topics(server):
    # A raw Produce to a missing topic (auto-creation on) gets
    # UNKNOWN_TOPIC_OR_PARTITION, and the topic still does not exist.
    p = produce_raw(server, "never-created")
    assert p[1] == UNKNOWN_TOPIC_OR_PARTITION, p
    req = MetadataRequest[4](topics=["never-created"], allow_auto_topic_creation=False)
    resp = raw(server, req, 4)
    assert resp.topics[0][0] == UNKNOWN_TOPIC_OR_PARTITION
    # Clients that ask Metadata first (as Kafka's producers do) still get
    # the topic auto-created.
    assert delivered(server, "created-by-metadata", [b"x"]) == [None]
    server.restart()
    assert read_all(server, "created-by-metadata", 1) == [b"x"]
