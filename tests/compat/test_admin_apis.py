"""Admin APIs against sluice: CreatePartitions, DeleteRecords,
DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, DescribeCluster,
DescribeLogDirs and OffsetForLeaderEpoch.

Through confluent-kafka's AdminClient (librdkafka picks the newest versions
it knows), kafka-python's admin client (older versions), a librdkafka
consumer (OffsetForLeaderEpoch when it validates a position), and raw
requests for every advertised version, encoded and decoded with
kafka-python's protocol types, so each version's wire format is checked by
an independent codec.
"""
import glob
import os
import socket
import struct
import time
from io import BytesIO

import pytest
from confluent_kafka import (Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition, OFFSET_BEGINNING, OFFSET_END)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ConfigSource, NewPartitions,
                                   NewTopic, OffsetSpec, ResourceType)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.protocol.api import (RequestHeader, RequestHeaderV2, ResponseHeader,
                                ResponseHeaderV2)
from kafka.protocol.types import (Array, Boolean, CompactArray, CompactString,
                                  Int8, Int16, Int32, Int64, Schema, String,
                                  TaggedFields)

TOPIC, BROKER = 2, 4
# Kafka error codes.
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
INVALID_PARTITIONS = 37
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNSUPPORTED_ENDPOINT_TYPE = 115


# ---------------------------------------------------------------- helpers

def admin(server):
    """One AdminClient per server, kept alive with it (librdkafka fails a
    dropped client's pending futures)."""
    if getattr(server, "_admin", None) is None:
        server._admin = AdminClient({"bootstrap.servers": server.bootstrap})
    return server._admin


def create(server, name, partitions=1, config=None):
    admin(server).create_topics(
        [NewTopic(name, partitions, 1, config=config or {})])[name].result(30)


def produce(server, topic, n, partition=0, size=100):
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0,
                  "batch.num.messages": 1})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v" * size, partition=partition)
        p.poll(0)
    assert p.flush(30) == 0


def one(futures):
    """The result of the only future in an admin result dict."""
    (f,) = futures.values()
    return f.result(30)


def error_code(fut):
    with pytest.raises(KafkaException) as e:
        fut.result(30)
    return e.value.args[0].code()


def offsets(server, topic, partition=0):
    a = admin(server)
    tp = TopicPartition(topic, partition)
    earliest = one(a.list_offsets({tp: OffsetSpec.earliest()})).offset
    latest = one(a.list_offsets({tp: OffsetSpec.latest()})).offset
    return earliest, latest


def describe(server, name, restype=ResourceType.TOPIC):
    return one(admin(server).describe_configs([ConfigResource(restype, name)]))


def segment_files(server, topic, partition=0):
    return sorted(glob.glob(os.path.join(server.data_dir, f"{topic}-{partition}", "*.log")))


# Raw requests: a tiny schema language over kafka-python's types. A spec
# is a list of (name, type); a type is "i8".."i64", "bool", "str" (nullable
# too), "[i32]" / "[str]" (arrays of primitives) or a nested spec (an array
# of structs). Flexible versions use compact strings and arrays and end
# every struct in tagged fields.

PRIMITIVES = {"i8": Int8, "i16": Int16, "i32": Int32, "i64": Int64, "bool": Boolean}


def _type(t, flex):
    if isinstance(t, list):
        s = _schema(t, flex)
        return CompactArray(s) if flex else Array(s)
    if t.startswith("["):
        inner = _type(t[1:-1], flex)
        return CompactArray(inner) if flex else Array(inner)
    if t == "str":
        return CompactString("utf-8") if flex else String("utf-8")
    return PRIMITIVES[t]


def _schema(spec, flex):
    fields = [(n, _type(t, flex)) for n, t in spec]
    if flex:
        fields.append(("_tags", TaggedFields))
    return Schema(*fields)


def _to_wire(spec, value, flex):
    out = []
    for n, t in spec:
        v = value.get(n)
        if isinstance(t, list) and v is not None:
            v = [_to_wire(t, x, flex) for x in v]
        out.append(v)
    if flex:
        out.append({})
    return tuple(out)


def _from_wire(spec, tup):
    out = {}
    for (n, t), v in zip(spec, tup):
        if isinstance(t, list) and v is not None:
            v = [_from_wire(t, x) for x in v]
        out[n] = v
    return out


def _recv(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


class _Header:
    """What kafka-python's header classes read from a request."""

    def __init__(self, key, version):
        self.API_KEY, self.API_VERSION = key, version


def call(server, key, version, flex, req_spec, resp_spec, value):
    """Sends one request and returns the decoded response as a dict."""
    header_cls = RequestHeaderV2 if flex else RequestHeader
    header = header_cls(_Header(key, version), correlation_id=42, client_id="sluice-test")
    body = header.encode() + _schema(req_spec, flex).encode(_to_wire(req_spec, value, flex))
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv(s, 4))
        data = BytesIO(_recv(s, size))
    resp_header = (ResponseHeaderV2 if flex else ResponseHeader).decode(data)
    assert resp_header.correlation_id == 42
    out = _from_wire(resp_spec, _schema(resp_spec, flex).decode(data))
    assert data.read() == b"", f"api {key} v{version}: trailing bytes"
    return out


# ----------------------------------------------------- CreatePartitions (37)

def test_create_partitions(server):
    create(server, "grow", 1)
    a = admin(server)
    assert one(a.create_partitions([NewPartitions("grow", 3)])) is None
    assert len(a.list_topics("grow", timeout=10).topics["grow"].partitions) == 3
    # The new partitions take records.
    produce(server, "grow", 2, partition=2)
    assert offsets(server, "grow", 2) == (0, 2)

    assert error_code(a.create_partitions([NewPartitions("grow", 2)])["grow"]) == \
        INVALID_PARTITIONS
    assert error_code(a.create_partitions([NewPartitions("grow", 3)])["grow"]) == \
        INVALID_PARTITIONS
    assert error_code(a.create_partitions([NewPartitions("nope", 3)])["nope"]) == \
        UNKNOWN_TOPIC_OR_PARTITION
    # A replica on a broker that does not exist.
    f = a.create_partitions([NewPartitions("grow", 4, replica_assignment=[[7]])])["grow"]
    assert error_code(f) == INVALID_REPLICA_ASSIGNMENT
    # validate_only changes nothing.
    one(a.create_partitions([NewPartitions("grow", 5)], validate_only=True))
    assert len(a.list_topics("grow", timeout=10).topics["grow"].partitions) == 3
    one(a.create_partitions([NewPartitions("grow", 4, replica_assignment=[[1]])]))
    assert len(a.list_topics("grow", timeout=10).topics["grow"].partitions) == 4


def test_create_partitions_kafka_python(server):
    create(server, "grow-kp", 1)
    kp = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        kp.create_partitions({"grow-kp": KpNewPartitions(total_count=2)})
    finally:
        kp.close()
    assert len(admin(server).list_topics("grow-kp", timeout=10).topics["grow-kp"].partitions) == 2


CREATE_PARTITIONS_REQ = [
    ("topics", [("name", "str"), ("count", "i32"), ("assignments", [("broker_ids", "[i32]")])]),
    ("timeout_ms", "i32"), ("validate_only", "bool")]
CREATE_PARTITIONS_RESP = [
    ("throttle_time_ms", "i32"),
    ("results", [("name", "str"), ("error_code", "i16"), ("error_message", "str")])]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_create_partitions_raw(server, version):
    create(server, "raw", 1)
    resp = call(server, 37, version, version >= 2, CREATE_PARTITIONS_REQ, CREATE_PARTITIONS_RESP, {
        "topics": [{"name": "raw", "count": 2, "assignments": [{"broker_ids": [1]}]},
                   {"name": "missing", "count": 2, "assignments": None}],
        "timeout_ms": 5000, "validate_only": False})
    assert [(r["name"], r["error_code"]) for r in resp["results"]] == \
        [("raw", 0), ("missing", UNKNOWN_TOPIC_OR_PARTITION)]


# -------------------------------------------------------- DeleteRecords (21)

def test_delete_records_and_list_offsets(server):
    create(server, "trim", 2)
    produce(server, "trim", 10, partition=0)
    produce(server, "trim", 5, partition=1)
    a = admin(server)
    res = a.delete_records([TopicPartition("trim", 0, 4)])
    assert one(res).low_watermark == 4
    assert offsets(server, "trim", 0) == (4, 10)
    # OFFSET_END (-1): everything up to the high watermark.
    assert one(a.delete_records([TopicPartition("trim", 1, OFFSET_END)])).low_watermark == 5
    assert offsets(server, "trim", 1) == (5, 5)
    # Past the high watermark.
    f = a.delete_records([TopicPartition("trim", 0, 11)])[TopicPartition("trim", 0, 11)]
    assert error_code(f) == OFFSET_OUT_OF_RANGE
    # A consumer starting from the beginning starts at the new log start.
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "trim",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        # Explicit OFFSET_BEGINNING: no committed-offset lookup.
        c.assign([TopicPartition("trim", 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.time() + 30
        while len(got) < 6 and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.offset())
        assert got == list(range(4, 10))
    finally:
        c.close()


def test_delete_records_compacted_topic_is_refused(server):
    create(server, "trim-compacted", 1, {"cleanup.policy": "compact"})
    produce(server, "trim-compacted", 3)
    a = admin(server)
    tp = TopicPartition("trim-compacted", 0, 1)
    assert error_code(a.delete_records([tp])[tp]) == POLICY_VIOLATION


DELETE_RECORDS_REQ = [
    ("topics", [("name", "str"), ("partitions", [("partition_index", "i32"), ("offset", "i64")])]),
    ("timeout_ms", "i32")]
DELETE_RECORDS_RESP = [
    ("throttle_time_ms", "i32"),
    ("topics", [("name", "str"), ("partitions", [
        ("partition_index", "i32"), ("low_watermark", "i64"), ("error_code", "i16")])])]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records_raw(server, version):
    create(server, "raw-trim", 1)
    produce(server, "raw-trim", 3)
    resp = call(server, 21, version, version >= 2, DELETE_RECORDS_REQ, DELETE_RECORDS_RESP, {
        "topics": [{"name": "raw-trim", "partitions": [
            {"partition_index": 0, "offset": 2}, {"partition_index": 5, "offset": 0}]}],
        "timeout_ms": 5000})
    parts = resp["topics"][0]["partitions"]
    assert [(p["partition_index"], p["error_code"], p["low_watermark"]) for p in parts] == \
        [(0, 0, 2), (5, UNKNOWN_TOPIC_OR_PARTITION, -1)]


# ---------------------------------------------------- DescribeConfigs (32)

def test_describe_configs_topic_sources(server_factory):
    server = server_factory("--override", "log.segment.bytes=2097152")
    create(server, "conf", 1, {"retention.ms": "3600000"})
    configs = describe(server, "conf")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == "2097152"
    assert configs["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not configs["retention.ms"].is_read_only
    # Synonyms (librdkafka always asks for them): most specific first.
    assert "log.segment.bytes" in configs["segment.bytes"].synonyms
    assert "retention.ms" in configs["retention.ms"].synonyms

    # The broker resource: this node's server keys, read-only.
    broker = describe(server, "1", ResourceType.BROKER)
    assert broker["log.segment.bytes"].value == "2097152"
    assert broker["log.segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert broker["log.segment.bytes"].is_read_only
    assert broker["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value

    a = admin(server)
    f = a.describe_configs([ConfigResource(ResourceType.TOPIC, "nope")])
    assert error_code(one_future(f)) == UNKNOWN_TOPIC_OR_PARTITION


def one_future(futures):
    (f,) = futures.values()
    return f


def test_describe_configs_kafka_python(server):
    create(server, "conf-kp", 1, {"cleanup.policy": "compact"})
    kp = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        (resp,) = kp.describe_configs(
            [KpConfigResource(KpConfigResourceType.TOPIC, "conf-kp")], include_synonyms=True)
    finally:
        kp.close()
    (res,) = resp.resources
    error, _msg, _type, name, entries = res[:5]
    assert (error, name) == (0, "conf-kp")
    values = {e[0]: e[1] for e in entries}
    assert values["cleanup.policy"] == "compact"


DESCRIBE_CONFIGS_REQ = [
    ("resources", [("resource_type", "i8"), ("resource_name", "str"),
                   ("configuration_keys", "[str]")]),
    ("include_synonyms", "bool")]


def describe_configs_resp(version):
    config = [("name", "str"), ("value", "str"), ("read_only", "bool"), ("config_source", "i8"),
              ("is_sensitive", "bool"),
              ("synonyms", [("name", "str"), ("value", "str"), ("source", "i8")])]
    if version >= 3:
        config += [("config_type", "i8"), ("documentation", "str")]
    return [("throttle_time_ms", "i32"),
            ("results", [("error_code", "i16"), ("error_message", "str"),
                         ("resource_type", "i8"), ("resource_name", "str"),
                         ("configs", config)])]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_raw(server, version):
    create(server, "raw-conf", 1, {"retention.bytes": "123456"})
    req = list(DESCRIBE_CONFIGS_REQ)
    if version >= 3:
        req.append(("include_documentation", "bool"))
    resp = call(server, 32, version, version >= 4, req, describe_configs_resp(version), {
        "resources": [
            {"resource_type": TOPIC, "resource_name": "raw-conf",
             "configuration_keys": ["retention.bytes", "segment.bytes"]},
            {"resource_type": BROKER, "resource_name": "1", "configuration_keys": None},
            {"resource_type": TOPIC, "resource_name": "bad/name", "configuration_keys": None},
        ],
        "include_synonyms": True, "include_documentation": True})
    topic, broker, bad = resp["results"]
    assert topic["error_code"] == 0
    by_name = {c["name"]: c for c in topic["configs"]}
    assert set(by_name) == {"retention.bytes", "segment.bytes"}
    rb = by_name["retention.bytes"]
    assert (rb["value"], rb["config_source"]) == ("123456", 1)
    assert [(s["name"], s["source"]) for s in rb["synonyms"]] == \
        [("retention.bytes", 1), ("log.retention.bytes", 5)]
    if version >= 3:
        assert rb["config_type"] == 5  # LONG
        assert rb["documentation"]
    assert broker["error_code"] == 0
    assert any(c["name"] == "log.dirs" and c["read_only"] for c in broker["configs"])
    assert bad["error_code"] == INVALID_TOPIC_EXCEPTION


# ---------------------------------- AlterConfigs (33), IncrementalAlterConfigs (44)

@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_the_set(server):
    create(server, "legacy", 1, {"retention.ms": "3600000"})
    a = admin(server)
    one(a.alter_configs([ConfigResource(ResourceType.TOPIC, "legacy",
                                        set_config={"retention.bytes": "1048576"})]))
    configs = describe(server, "legacy")
    assert configs["retention.bytes"].value == "1048576"
    assert configs["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # Left out: back to the default.
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    bad = a.alter_configs([ConfigResource(ResourceType.TOPIC, "legacy",
                                          set_config={"segment.bytes": "lots"})])
    assert error_code(one_future(bad)) == INVALID_CONFIG
    bad = a.alter_configs([ConfigResource(ResourceType.TOPIC, "legacy",
                                          set_config={"no.such.config": "1"})])
    assert error_code(one_future(bad)) == INVALID_CONFIG
    missing = a.alter_configs([ConfigResource(ResourceType.TOPIC, "nope", set_config={})])
    assert error_code(one_future(missing)) == UNKNOWN_TOPIC_OR_PARTITION
    broker = a.alter_configs([ConfigResource(ResourceType.BROKER, "1",
                                             set_config={"log.retention.hours": "1"})])
    assert error_code(one_future(broker)) == INVALID_REQUEST
    # validate_only: accepted, not applied.
    one(a.alter_configs([ConfigResource(ResourceType.TOPIC, "legacy",
                                        set_config={"retention.bytes": "2048"})],
                        validate_only=True))
    assert describe(server, "legacy")["retention.bytes"].value == "1048576"


def test_alter_configs_kafka_python(server):
    create(server, "legacy-kp", 1)
    kp = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        kp.alter_configs([KpConfigResource(KpConfigResourceType.TOPIC, "legacy-kp",
                                           configs={"retention.ms": "60000"})])
    finally:
        kp.close()
    assert describe(server, "legacy-kp")["retention.ms"].value == "60000"


def incremental(server, topic, *entries, validate_only=False):
    ops = [ConfigEntry(k, v, incremental_operation=op) for k, op, v in entries]
    return admin(server).incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=ops)],
        validate_only=validate_only)


def test_incremental_alter_configs(server):
    create(server, "inc", 1, {"retention.ms": "3600000"})
    one(incremental(server, "inc",
                    ("max.message.bytes", AlterConfigOpType.SET, "2000000"),
                    ("retention.ms", AlterConfigOpType.DELETE, None),
                    ("cleanup.policy", AlterConfigOpType.APPEND, "compact")))
    configs = describe(server, "inc")
    assert configs["max.message.bytes"].value == "2000000"
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "compact,delete"
    one(incremental(server, "inc", ("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete")))
    assert describe(server, "inc")["cleanup.policy"].value == "compact"

    # A larger batch now fits the topic (keyed: the topic is compacted).
    p = Producer({"bootstrap.servers": server.bootstrap, "message.max.bytes": 3000000})
    errors = []
    p.produce("inc", b"x" * 1_500_000, key=b"k", on_delivery=lambda e, m: errors.append(e))
    assert p.flush(30) == 0 and errors == [None]

    f = incremental(server, "inc", ("retention.ms", AlterConfigOpType.APPEND, "1"))
    assert error_code(one_future(f)) == INVALID_CONFIG
    f = incremental(server, "inc", ("segment.bytes", AlterConfigOpType.SET, "-5"))
    assert error_code(one_future(f)) == INVALID_CONFIG
    f = incremental(server, "nope", ("retention.ms", AlterConfigOpType.SET, "1"))
    assert error_code(one_future(f)) == UNKNOWN_TOPIC_OR_PARTITION
    one(incremental(server, "inc", ("retention.ms", AlterConfigOpType.SET, "1000"),
                    validate_only=True))
    assert describe(server, "inc")["retention.ms"].value == "604800000"
    f = admin(server).incremental_alter_configs([ConfigResource(
        ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("log.retention.hours", "1",
                        incremental_operation=AlterConfigOpType.SET)])])
    assert error_code(one_future(f)) == INVALID_REQUEST


def test_config_changes_take_effect_in_storage(server_factory):
    server = server_factory("--override", "log.retention.check.interval.ms=100")
    create(server, "store", 1)
    one(incremental(server, "store", ("segment.bytes", AlterConfigOpType.SET, "16384")))
    produce(server, "store", 100, size=1000)
    assert len(segment_files(server, "store")) >= 5, segment_files(server, "store")
    assert offsets(server, "store") == (0, 100)

    # retention.bytes: whole old segments go until the partition fits.
    one(incremental(server, "store", ("retention.bytes", AlterConfigOpType.SET, "40000")))
    deadline = time.time() + 30
    while time.time() < deadline and offsets(server, "store")[0] == 0:
        time.sleep(0.1)
    earliest, latest = offsets(server, "store")
    assert earliest > 0 and latest == 100
    total = sum(os.path.getsize(f) for f in segment_files(server, "store"))
    assert total < 40000 + 16384, total
    # The settings survive a restart (they live in the metadata log).
    server.restart()
    configs = describe(server, "store")
    assert configs["segment.bytes"].value == "16384"
    assert configs["retention.bytes"].value == "40000"


INCREMENTAL_REQ = [
    ("resources", [("resource_type", "i8"), ("resource_name", "str"),
                   ("configs", [("name", "str"), ("config_operation", "i8"), ("value", "str")])]),
    ("validate_only", "bool")]
LEGACY_REQ = [
    ("resources", [("resource_type", "i8"), ("resource_name", "str"),
                   ("configs", [("name", "str"), ("value", "str")])]),
    ("validate_only", "bool")]
ALTER_RESP = [
    ("throttle_time_ms", "i32"),
    ("responses", [("error_code", "i16"), ("error_message", "str"),
                   ("resource_type", "i8"), ("resource_name", "str")])]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_raw(server, version):
    create(server, "raw-legacy", 1)
    resp = call(server, 33, version, version >= 2, LEGACY_REQ, ALTER_RESP, {
        "resources": [
            {"resource_type": TOPIC, "resource_name": "raw-legacy",
             "configs": [{"name": "retention.ms", "value": "1000"}]},
            {"resource_type": TOPIC, "resource_name": "raw-legacy-x", "configs": []},
            {"resource_type": TOPIC, "resource_name": "x",
             "configs": [{"name": "retention.ms", "value": None}]},
        ], "validate_only": False})
    codes = [(r["resource_name"], r["error_code"]) for r in resp["responses"]]
    assert codes == [("raw-legacy", 0), ("raw-legacy-x", UNKNOWN_TOPIC_OR_PARTITION),
                     ("x", INVALID_REQUEST)]
    assert resp["responses"][1]["error_message"] == "The topic 'raw-legacy-x' does not exist."
    assert describe(server, "raw-legacy")["retention.ms"].value == "1000"


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_raw(server, version):
    create(server, "raw-inc", 1)
    resp = call(server, 44, version, version >= 1, INCREMENTAL_REQ, ALTER_RESP, {
        "resources": [
            {"resource_type": TOPIC, "resource_name": "raw-inc", "configs": [
                {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
                {"name": "retention.ms", "config_operation": 0, "value": "2000"}]},
            {"resource_type": BROKER, "resource_name": "1", "configs": []},
            {"resource_type": BROKER, "resource_name": "2", "configs": []},
            {"resource_type": TOPIC, "resource_name": "y", "configs": [
                {"name": "a", "config_operation": 7, "value": "1"}]},
        ], "validate_only": False})
    codes = [r["error_code"] for r in resp["responses"]]
    assert codes == [0, 0, INVALID_REQUEST, INVALID_REQUEST]
    configs = describe(server, "raw-inc")
    assert configs["cleanup.policy"].value == "compact,delete"
    assert configs["retention.ms"].value == "2000"


# ------------------------------------------------------ DescribeCluster (60)

def describe_cluster_specs(version):
    req = [("include_cluster_authorized_operations", "bool")]
    if version >= 1:
        req.append(("endpoint_type", "i8"))
    if version >= 2:
        req.append(("include_fenced_brokers", "bool"))
    broker = [("broker_id", "i32"), ("host", "str"), ("port", "i32"), ("rack", "str")]
    if version >= 2:
        broker.append(("is_fenced", "bool"))
    resp = [("throttle_time_ms", "i32"), ("error_code", "i16"), ("error_message", "str")]
    if version >= 1:
        resp.append(("endpoint_type", "i8"))
    resp += [("cluster_id", "str"), ("controller_id", "i32"), ("brokers", broker),
             ("cluster_authorized_operations", "i32")]
    return req, resp


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_raw(server, version):
    req, resp_spec = describe_cluster_specs(version)
    resp = call(server, 60, version, True, req, resp_spec, {
        "include_cluster_authorized_operations": True, "endpoint_type": 1,
        "include_fenced_brokers": True})
    assert resp["error_code"] == 0
    assert resp["cluster_id"] == admin(server).list_topics(timeout=10).cluster_id
    assert resp["controller_id"] == 1
    (b,) = resp["brokers"]
    assert (b["broker_id"], b["host"], b["port"]) == (1, "127.0.0.1", server.port)
    ops = resp["cluster_authorized_operations"]
    assert ops & (1 << 8) and ops & (1 << 10)  # DESCRIBE, DESCRIBE_CONFIGS
    if version >= 1:
        resp = call(server, 60, version, True, req, resp_spec, {
            "include_cluster_authorized_operations": False, "endpoint_type": 2,
            "include_fenced_brokers": False})
        assert resp["error_code"] == UNSUPPORTED_ENDPOINT_TYPE


def test_describe_cluster_admin(server):
    # librdkafka answers describe_cluster from Metadata; it must agree.
    res = admin(server).describe_cluster(include_authorized_operations=True).result(30)
    assert res.controller.id == 1
    assert [n.id for n in res.nodes] == [1]
    req, resp_spec = describe_cluster_specs(0)
    raw = call(server, 60, 0, True, req, resp_spec,
               {"include_cluster_authorized_operations": False})
    assert res.cluster_id == raw["cluster_id"]


# ------------------------------------------------------ DescribeLogDirs (35)

def describe_log_dirs_resp(version):
    result = [("error_code", "i16"), ("log_dir", "str"), ("topics", [
        ("name", "str"), ("partitions", [("partition_index", "i32"), ("partition_size", "i64"),
                                         ("offset_lag", "i64"), ("is_future_key", "bool")])])]
    if version >= 4:
        result += [("total_bytes", "i64"), ("usable_bytes", "i64")]
    resp = [("throttle_time_ms", "i32")]
    if version >= 3:
        resp.append(("error_code", "i16"))
    resp.append(("results", result))
    return resp


DESCRIBE_LOG_DIRS_REQ = [("topics", [("topic", "str"), ("partitions", "[i32]")])]


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_log_dirs_raw(server, version):
    create(server, "dirs", 2)
    produce(server, "dirs", 20, partition=1, size=500)
    resp = call(server, 35, version, version >= 2, DESCRIBE_LOG_DIRS_REQ,
                describe_log_dirs_resp(version), {"topics": None})
    (d,) = resp["results"]
    assert d["error_code"] == 0
    assert os.path.samefile(d["log_dir"], server.data_dir)
    topics = {t["name"]: t for t in d["topics"]}
    sizes = {p["partition_index"]: p["partition_size"] for p in topics["dirs"]["partitions"]}
    on_disk = sum(os.path.getsize(f) for f in segment_files(server, "dirs", 1))
    assert sizes == {0: 0, 1: on_disk} and on_disk > 20 * 500
    assert all(p["offset_lag"] == 0 for p in topics["dirs"]["partitions"])
    if version >= 4:
        assert 0 <= d["usable_bytes"] <= d["total_bytes"] and d["total_bytes"] > 0

    resp = call(server, 35, version, version >= 2, DESCRIBE_LOG_DIRS_REQ,
                describe_log_dirs_resp(version),
                {"topics": [{"topic": "dirs", "partitions": [1, 7]}]})
    (d,) = resp["results"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in d["topics"]] == \
        [("dirs", [1])]


# ------------------------------------------------- OffsetForLeaderEpoch (23)

def offset_for_leader_epoch_specs(version):
    req = [("replica_id", "i32")] if version >= 3 else []
    req.append(("topics", [("topic", "str"), ("partitions", [
        ("partition", "i32"), ("current_leader_epoch", "i32"), ("leader_epoch", "i32")])]))
    resp = [("throttle_time_ms", "i32"), ("topics", [("topic", "str"), ("partitions", [
        ("error_code", "i16"), ("partition", "i32"), ("leader_epoch", "i32"),
        ("end_offset", "i64")])])]
    return req, resp


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_raw(server, version):
    create(server, "epochs", 2)
    produce(server, "epochs", 7)
    req, resp_spec = offset_for_leader_epoch_specs(version)
    parts = [(0, -1, 0), (0, 0, 0), (1, 0, 0), (0, 1, 0), (0, -1, 3), (4, -1, 0)]
    resp = call(server, 23, version, version >= 4, req, resp_spec, {
        "replica_id": -1,
        "topics": [{"topic": "epochs", "partitions": [
            {"partition": p, "current_leader_epoch": c, "leader_epoch": e} for p, c, e in parts]}]})
    got = [(p["error_code"], p["leader_epoch"], p["end_offset"])
           for p in resp["topics"][0]["partitions"]]
    assert got == [
        (0, 0, 7),
        (0, 0, 7),
        (0, 0, 0),  # empty partition: epoch 0 starts and ends at 0
        (UNKNOWN_LEADER_EPOCH, -1, -1),  # newer than the broker's epoch
        (0, -1, -1),  # an epoch the log never had
        (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]


def test_consumer_validates_position_with_leader_epoch(server):
    """librdkafka validates an assigned position that carries a leader epoch
    with OffsetForLeaderEpoch before fetching from it."""
    create(server, "validate", 1)
    produce(server, "validate", 10)
    logs = []

    class Collect:
        def log(self, level, fmt, *args):
            logs.append(fmt % args if args else fmt)

        def __getattr__(self, name):  # debug/info/... all collected
            return lambda msg, *args, **kw: logs.append(msg % args if args else msg)

    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "validate",
                  "enable.auto.commit": False, "debug": "protocol,fetch",
                  "logger": Collect()})
    try:
        c.assign([TopicPartition("validate", 0, 6, leader_epoch=0)])
        got = []
        deadline = time.time() + 30
        while len(got) < 4 and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.leader_epoch()))
        assert got == [(6, 0), (7, 0), (8, 0), (9, 0)]
    finally:
        c.close()
    assert any("OffsetForLeaderEpoch" in line for line in logs), logs[-20:]
