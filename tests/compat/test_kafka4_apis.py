"""Kafka 4 API surface seen by kafka-python: 3.x infers Kafka 4.0 from
Sluice's ApiVersions (ListOffsets v10) and works with the versions that
picks; 2.2.15's inference, and ListOffsets at the versions it picks when
told the broker is Kafka 4.0.

kafka-python 2.2.15 infers the broker version from a table in
`BrokerConnection._infer_broker_version_from_api_versions` (kafka/conn.py)
whose newest active entries are (2, 6) DescribeClientQuotas v0, (2, 5)
DescribeAcls v2 and (2, 4) Produce v8; the entries from 2.7 to 3.9 are
commented out and there is none for 4.0. Sluice implements neither quotas
nor ACLs, so it is identified as 2.4: the highest version this client can
infer without advertising APIs that are not implemented. Its Kafka 4.0
table (`kafka.protocol.broker_api_versions`) is what it uses when
configured with `api_version=(4, 0)`; the ranges Sluice shares with it for
ListOffsets and DescribeTopicPartitions are Kafka 4.0's.
"""
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.conn import BrokerConnection
from kafka.protocol.broker_api_versions import BROKER_API_VERSIONS

LIST_OFFSETS = 2
DESCRIBE_TOPIC_PARTITIONS = 75


def api_versions(server):
    c = BrokerConnection("127.0.0.1", server.port, 0)
    try:
        assert c.connect_blocking(10)
        return c._api_versions, c._api_version
    finally:
        c.close()


def test_kafka_python_version_inference(server):
    a = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        assert a._client.check_version() == (2, 4)
    finally:
        a.close()
    advertised, inferred = api_versions(server)
    assert inferred == (2, 4)
    kafka_4 = BROKER_API_VERSIONS[(4, 0)]
    for key in (LIST_OFFSETS, DESCRIBE_TOPIC_PARTITIONS):
        assert advertised[key] == kafka_4[key], key
    # What would move the inference up is not advertised (not implemented).
    for key in (29, 48):  # DescribeAcls, DescribeClientQuotas
        assert key not in advertised


def test_offsets_with_kafka_4_versions(server):
    a = KafkaAdminClient(bootstrap_servers=server.bootstrap, api_version=(4, 0))
    try:
        a.create_topics([NewTopic("k4-offsets", 1, 1)])
    finally:
        a.close()
    p = KafkaProducer(bootstrap_servers=server.bootstrap, api_version=(4, 0))
    for ts in (1000, 3000, 2000):
        p.send("k4-offsets", value=b"v%d" % ts, timestamp_ms=ts)
    p.flush(10)
    p.close()
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, api_version=(4, 0), group_id=None)
    try:
        tp = TopicPartition("k4-offsets", 0)
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 3}
        found = c.offsets_for_times({tp: 1500})[tp]
        assert (found.offset, found.timestamp) == (1, 3000)
        assert c.offsets_for_times({tp: 9000})[tp] is None
    finally:
        c.close()


def test_kafka_python_3_infers_kafka_4(server):
    """kafka-python 3.x (the line with a Kafka 4.0 entry in its inference
    table: ListOffsets v10) sees Sluice as Kafka 4.0 and works with the API
    versions that picks."""
    import json
    import os
    import subprocess
    from pathlib import Path

    py = os.environ.get("SLUICETEST_PYTHON_KP3")
    assert py, ("SLUICETEST_PYTHON_KP3 is not set: run scripts/test.sh, which installs "
                "tests/requirements-kafka-python3.txt into target/test-venv-kp3")
    script = Path(__file__).with_name("kafka_python3_check.py")
    run = subprocess.run([py, str(script), server.bootstrap, "kp3-topic"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["inferred"] == [4, 0], got
    # DescribeTopicPartitions: sorted names, at most 3 partitions a page,
    # the unknown topic with UNKNOWN_TOPIC_OR_PARTITION, then the cursor.
    assert got["describe_pages"] == [
        [["kp3-missing", 3, []], ["kp3-topic", 0, [0]], ["kp3-topic-wide", 0, [0, 1]]],
        [["kp3-topic-wide", 0, [2, 3, 4]]],
    ], got
    # DescribeQuorum v2: node 1 is the sole voter and leader of
    # __cluster_metadata-0, caught up to the high watermark, with no
    # controller listener to report.
    q = got["quorum"]
    assert [t["topic_name"] for t in q["topics"]] == ["__cluster_metadata"], q
    p = q["topics"][0]["partitions"][0]
    assert (p["partition_index"], p["error"], p["leader_id"], p["leader_epoch"]) == (0, None, 1, 0), q
    assert p["high_watermark"] > 0, q
    assert [(v["replica_id"], v["log_end_offset"]) for v in p["current_voters"]] == [
        (1, p["high_watermark"])], q
    assert p["current_voters"][0]["last_caught_up_timestamp"] > 0, q
    assert p["observers"] == [], q
    assert [(n["node_id"], n["listeners"]) for n in q["nodes"]] == [(1, [])], q
    assert got["values"] == [f"v{i}" for i in range(10)], got
    assert got["offset_for_1005"] == 5, got
    assert got["end"] == 10, got
