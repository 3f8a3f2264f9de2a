"""Several data folders per broker (JBOD, design 024) with real clients:
a `sluice server` with two `log.dirs`, confluent-kafka producing to and
consuming from several partitions, DescribeLogDirs and AlterReplicaLogDirs
as raw requests encoded and decoded with kafka-python's protocol types (to
pick each version; kafka-python 2.2's admin client only speaks
DescribeLogDirs v0, which Kafka 4 removed, and confluent-kafka has no
log-dir calls), and a restart; a move paced by the dynamic
`replica.alter.log.dirs.io.max.bytes.per.second` (confluent-kafka's
IncrementalAlterConfigs and DescribeConfigs on the broker) while producing
goes on. kafka-python 3's admin client, which has both log-dir calls,
drives them on a three-node cluster in tests/compat/test_cluster_admin.py.
"""
import os
import threading
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ConfigSource, ResourceType)

from test_admin_apis import (DESCRIBE_LOG_DIRS_REQ, admin, call, create,
                             describe, describe_log_dirs_resp, one, produce)

MOVE_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"

LOG_DIR_NOT_FOUND = 57
ALTER_REQ = [("dirs", [("path", "str"), ("topics", [("name", "str"), ("partitions", "[i32]")])])]
ALTER_RESP = [("throttle_time_ms", "i32"), ("results", [
    ("topic_name", "str"), ("partitions", [("partition_index", "i32"), ("error_code", "i16")])])]


def folders(server, topic):
    """{partition: folder index} from DescribeLogDirs v4."""
    resp = call(server, 35, 4, True, DESCRIBE_LOG_DIRS_REQ, describe_log_dirs_resp(4),
                {"topics": None})
    out = {}
    for i, d in enumerate(resp["results"]):
        assert d["error_code"] == 0
        assert d["total_bytes"] > 0
        for t in d["topics"]:
            if t["name"] == topic:
                for p in t["partitions"]:
                    assert not p["is_future_key"]
                    out[p["partition_index"]] = i
    return [d["log_dir"] for d in resp["results"]], out


def alter(server, path, topic, partitions, version=2):
    resp = call(server, 34, version, version >= 2, ALTER_REQ, ALTER_RESP,
                {"dirs": [{"path": str(path), "topics": [{"name": topic, "partitions": partitions}]}]})
    return [p["error_code"] for t in resp["results"] for p in t["partitions"]]


def future_in(server, topic, folder):
    """Whether DescribeLogDirs lists a future log of `topic` in folder number
    `folder` (a move in progress)."""
    resp = call(server, 35, 4, True, DESCRIBE_LOG_DIRS_REQ, describe_log_dirs_resp(4),
                {"topics": None})
    return any(p["is_future_key"] for t in resp["results"][folder]["topics"]
               if t["name"] == topic for p in t["partitions"])


def set_move_rate(server, value):
    """Sets (or, with None, deletes) the broker's move throttle through
    IncrementalAlterConfigs."""
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    entry = ConfigEntry(MOVE_RATE, value, incremental_operation=op)
    one(admin(server).incremental_alter_configs(
        [ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])]))


def consume_counts(server, topic, want):
    """Reads every partition from the start until `want` counts are seen
    (or 30 s pass); returns the counts."""
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "jbod-check",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in want])
    counts = {p: 0 for p in want}
    deadline = time.time() + 30
    try:
        while counts != want and time.time() < deadline:
            for m in c.consume(100, 1.0):
                assert m.error() is None, m.error()
                counts[m.partition()] += 1
    finally:
        c.close()
    return counts


def test_two_log_dirs_spread_move_and_restart(server_factory, tmp_path):
    a, b = tmp_path / "data", tmp_path / "data2"
    s = server_factory("--override", f"log.dirs={a},{b}")
    create(s, "jbod", 4)
    for p in range(4):
        produce(s, "jbod", 20, partition=p)
    dirs, where = folders(s, "jbod")
    assert [os.path.realpath(d) for d in dirs] == [os.path.realpath(a), os.path.realpath(b)]
    # Fewest partitions first: both folders are used.
    assert where == {0: 0, 1: 1, 2: 0, 3: 1}
    assert (a / "jbod-0").is_dir() and (b / "jbod-1").is_dir()
    for d in (a, b):
        meta = (d / "meta.properties").read_text()
        assert "cluster.id=" in meta and "directory.id=" in meta

    # Move partition 0 to the second folder, then write more to it.
    assert alter(s, tmp_path / "nowhere", "jbod", [0], version=1) == [LOG_DIR_NOT_FOUND]
    assert alter(s, b, "jbod", [0]) == [0]
    assert folders(s, "jbod")[1] == {0: 1, 1: 1, 2: 0, 3: 1}
    assert not (a / "jbod-0").exists() and (b / "jbod-0").is_dir()
    produce(s, "jbod", 5, partition=0)

    s.restart()
    assert folders(s, "jbod")[1] == {0: 1, 1: 1, 2: 0, 3: 1}
    want = {0: 25, 1: 20, 2: 20, 3: 20}
    assert consume_counts(s, "jbod", want) == want


def test_throttled_move_lets_producers_go_on(server_factory, tmp_path):
    """The dynamic move throttle holds the copy of the sealed segments
    while confluent-kafka keeps producing to the partition; deleting it
    lets the move finish with every record."""
    a, b = tmp_path / "data", tmp_path / "data2"
    s = server_factory("--override", f"log.dirs={a},{b}")
    create(s, "slow", 1, config={"segment.bytes": "2000"})
    produce(s, "slow", 30, partition=0)
    assert folders(s, "slow")[1] == {0: 0}
    rate = describe(s, "1", ResourceType.BROKER)[MOVE_RATE]
    assert rate.value == str(2**63 - 1) and not rate.is_read_only
    set_move_rate(s, "1")
    rate = describe(s, "1", ResourceType.BROKER)[MOVE_RATE]
    assert rate.value == "1" and rate.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    result = {}
    mover = threading.Thread(target=lambda: result.update(codes=alter(s, b, "slow", [0])))
    mover.start()
    deadline = time.time() + 30
    while not future_in(s, "slow", 1):
        assert time.time() < deadline, "no move in progress"
        time.sleep(0.05)
    # Producing goes on while the throttled copy waits.
    produce(s, "slow", 10, partition=0)
    assert future_in(s, "slow", 1) and mover.is_alive(), "still copying at 1 byte/s"
    set_move_rate(s, None)
    mover.join(30)
    assert result.get("codes") == [0]
    assert folders(s, "slow")[1] == {0: 1}
    assert consume_counts(s, "slow", {0: 40}) == {0: 40}
