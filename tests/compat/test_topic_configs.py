"""Kafka 4's topic and broker configs against sluice (issue #9, parts 4-5).

- confluent-kafka's and kafka-python's admin clients create topics with the
  topic configs Sluice refused before (`compression.type`,
  `file.delete.delay.ms`, `preallocate`, `unclean.leader.election.enable`,
  ...) and describe them back with Kafka's sources and synonyms;
- bad values get INVALID_CONFIG with a message naming the key;
- the behaviour on one node: LogAppendTime, preallocated segment files,
  `.deleted` files kept for `file.delete.delay.ms`;
- `sluice server --config` with server.properties files modelled on
  kafka-python's and confluent-kafka's (trivup) broker fixtures starts and
  serves; a bad value of a known key stops it naming the key;
- every topic config survives a restart, clean or killed.
"""
import glob
import os
import signal
import subprocess
import time

import pytest
from confluent_kafka import (Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition, TIMESTAMP_LOG_APPEND_TIME)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ConfigSource, NewTopic,
                                   ResourceType)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidConfigurationError

from conftest import BIN, Server, free_port

TOPIC_SOURCE = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
STATIC = ConfigSource.STATIC_BROKER_CONFIG.value
DEFAULT = ConfigSource.DEFAULT_CONFIG.value

# The topic configs confluent-kafka's own admin tests stopped at, and the
# other ones with behaviour on one node.
CONFIGS = {
    "compression.type": "gzip",
    "file.delete.delay.ms": "1000",
    "preallocate": "true",
    "unclean.leader.election.enable": "true",
    "segment.jitter.ms": "100",
    "max.compaction.lag.ms": "600000",
    "message.timestamp.type": "LogAppendTime",
    "segment.bytes": "1048576",
}

# Every topic config Kafka 4 describes.
KAFKA4_TOPIC_KEYS = {
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level",
    "compression.type", "compression.zstd.level", "delete.retention.ms",
    "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "local.retention.bytes",
    "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
    "message.timestamp.type", "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.log.copy.disable", "remote.log.delete.on.disable",
    "remote.storage.enable", "retention.bytes", "retention.ms",
    "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
}


def admin(server):
    if getattr(server, "_admin", None) is None:
        server._admin = AdminClient({"bootstrap.servers": server.bootstrap})
    return server._admin


def one(futures):
    (f,) = futures.values()
    return f.result(30)


def create(server, name, config):
    one(admin(server).create_topics([NewTopic(name, 1, 1, config=config)]))


def describe(server, name, restype=ResourceType.TOPIC):
    return one(admin(server).describe_configs([ConfigResource(restype, name)]))


def synonyms(entry):
    return [(s.name, s.value, s.source) for s in entry.synonyms.values()]


def produce(bootstrap, topic, n, size=100):
    """`n` records, one batch each."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                  "batch.num.messages": 1})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d-" % i + b"x" * size)
    assert p.flush(30) == 0


def consume(bootstrap, topic, n, offset=0, timeout=30, partitions=1):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}-{offset}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, offset) for p in range(partitions)])
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append(m)
    c.close()
    return got


def test_confluent_creates_and_describes_kafka4_topic_configs(server):
    create(server, "k4", CONFIGS)
    configs = describe(server, "k4")
    assert set(configs) == KAFKA4_TOPIC_KEYS
    for key, value in CONFIGS.items():
        assert configs[key].value == value, key
        assert configs[key].source == TOPIC_SOURCE, key
        assert not configs[key].is_read_only and not configs[key].is_sensitive
    # Synonyms in Kafka's order: the topic level, then the broker keys
    # that give the default, by precedence.
    assert synonyms(configs["file.delete.delay.ms"]) == [
        ("file.delete.delay.ms", "1000", TOPIC_SOURCE),
        ("log.segment.delete.delay.ms", "60000", DEFAULT)]
    assert synonyms(configs["preallocate"]) == [
        ("preallocate", "true", TOPIC_SOURCE), ("log.preallocate", "false", DEFAULT)]
    # (confluent-kafka keys synonyms by name, so same-name levels such as
    # compression.type's are checked with kafka-python below.)
    assert synonyms(configs["max.compaction.lag.ms"]) == [
        ("max.compaction.lag.ms", "600000", TOPIC_SOURCE),
        ("log.cleaner.max.compaction.lag.ms", "9223372036854775807", DEFAULT)]
    # segment.jitter.ms's first broker synonym (log.roll.jitter.ms) has no
    # default: Kafka lists no broker level for it.
    assert synonyms(configs["segment.jitter.ms"]) == [
        ("segment.jitter.ms", "100", TOPIC_SOURCE)]
    # Defaults: Kafka's values and sources.
    assert configs["index.interval.bytes"].value == "4096"
    assert configs["index.interval.bytes"].source == DEFAULT
    assert synonyms(configs["index.interval.bytes"]) == [
        ("log.index.interval.bytes", "4096", DEFAULT)]
    assert configs["remote.storage.enable"].value == "false"
    assert configs["compression.zstd.level"].value == "3"
    assert configs["local.retention.ms"].value == "-2"

    # LogAppendTime: the broker stamps its own time.
    before = int(time.time() * 1000)
    produce(server.bootstrap, "k4", 3)
    msgs = consume(server.bootstrap, "k4", 3)
    assert len(msgs) == 3
    for m in msgs:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= int(time.time() * 1000) + 1000
    # preallocate: the active segment file is segment.bytes long.
    (active,) = glob.glob(os.path.join(server.data_dir, "k4-0", "*.log"))
    assert os.path.getsize(active) == 1048576


def test_kafka_python_admin_creates_and_describes(server):
    kp = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        kp.create_topics([KpNewTopic("k4-kp", 1, 1, topic_configs={
            "preallocate": "false", "file.delete.delay.ms": "0",
            "unclean.leader.election.enable": "false", "compression.type": "lz4",
            "compression.lz4.level": "4"})])
        (resp,) = kp.describe_configs(
            [KpConfigResource(KpConfigResourceType.TOPIC, "k4-kp")], include_synonyms=True)
        with pytest.raises(InvalidConfigurationError):
            kp.create_topics([KpNewTopic("k4-kp-bad", 1, 1,
                                         topic_configs={"preallocate": "maybe"})])
    finally:
        kp.close()
    (res,) = resp.resources
    error, _msg, _type, name, entries = res[:5]
    assert (error, name) == (0, "k4-kp")
    by_name = {e[0]: e for e in entries}
    assert set(by_name) == KAFKA4_TOPIC_KEYS
    for key, value in [("preallocate", "false"), ("file.delete.delay.ms", "0"),
                       ("compression.type", "lz4"), ("compression.lz4.level", "4")]:
        name_, val, _ro, source = by_name[key][:4]
        assert (val, source) == (value, TOPIC_SOURCE), key
    def syn(key):
        return [(s[0], s[1], s[2]) for s in by_name[key][5]]
    assert syn("file.delete.delay.ms") == [
        ("file.delete.delay.ms", "0", TOPIC_SOURCE),
        ("log.segment.delete.delay.ms", "60000", DEFAULT)]
    # Same name at the topic and the broker level.
    assert syn("compression.type") == [
        ("compression.type", "lz4", TOPIC_SOURCE), ("compression.type", "producer", DEFAULT)]
    assert syn("unclean.leader.election.enable") == [
        ("unclean.leader.election.enable", "false", TOPIC_SOURCE),
        ("unclean.leader.election.enable", "false", DEFAULT)]
    # retention.ms: Kafka lists only log.retention.ms's own levels (unset,
    # no default), so a defaulted retention.ms has no synonym at all.
    assert by_name["retention.ms"][1:4] == ("604800000", False, DEFAULT)
    assert syn("retention.ms") == []


@pytest.mark.parametrize("key,value", [
    ("preallocate", "maybe"),
    ("compression.type", "brotli"),
    ("compression.type", "GZIP"),
    ("compression.gzip.level", "10"),
    ("segment.jitter.ms", "-1"),
    ("file.delete.delay.ms", "soon"),
    ("message.timestamp.type", "NoTime"),
    ("unclean.leader.election.enable", "2"),
    ("max.compaction.lag.ms", "0"),
    ("leader.replication.throttled.replicas", "everything"),
    ("remote.storage.enable", "true"),
    ("message.format.version", "3.0"),
    ("message.downconversion.enable", "true"),
])
def test_invalid_values_get_invalid_config_naming_the_key(server, key, value):
    f = admin(server).create_topics([NewTopic("bad", 1, 1, config={key: value})])
    with pytest.raises(KafkaException) as e:
        one(f)
    err = e.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert key in err.str(), err.str()
    # The same through IncrementalAlterConfigs on an existing topic.
    create(server, "good", {})
    ops = [ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)]
    f = admin(server).incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, "good", incremental_configs=ops)])
    with pytest.raises(KafkaException) as e:
        one(f)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert key in e.value.args[0].str()


def test_deleted_segments_wait_for_file_delete_delay(server):
    create(server, "fdd", {"segment.bytes": "16384", "file.delete.delay.ms": "1500"})
    produce(server.bootstrap, "fdd", 120, size=1000)
    part = os.path.join(server.data_dir, "fdd-0")
    assert len(glob.glob(os.path.join(part, "*.log"))) > 3
    tp = TopicPartition("fdd", 0, 60)
    res = admin(server).delete_records([tp])
    assert res[tp].result(30).low_watermark == 60
    # Renamed .deleted at once, unlinked after the delay.
    assert glob.glob(os.path.join(part, "*.log.deleted"))
    deadline = time.time() + 15
    while glob.glob(os.path.join(part, "*.deleted")) and time.time() < deadline:
        time.sleep(0.2)
    assert not glob.glob(os.path.join(part, "*.deleted"))
    msgs = consume(server.bootstrap, "fdd", 60, offset=60)
    assert [m.offset() for m in msgs] == list(range(60, 120))


def test_topic_configs_survive_restarts(server):
    all_configs = dict(CONFIGS, **{
        "cleanup.policy": "compact,delete", "compression.zstd.level": "7",
        "leader.replication.throttled.replicas": "0:1",
        "follower.replication.throttled.replicas": "*",
        "local.retention.ms": "1000", "remote.log.copy.disable": "true",
        "min.cleanable.dirty.ratio": "0.25", "message.timestamp.after.max.ms": "5000"})
    create(server, "keep", all_configs)
    produce(server.bootstrap, "keep", 5)
    before = {k: (v.value, v.source) for k, v in describe(server, "keep").items()}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        server.restart(sig)
        server._admin = None
        after = {k: (v.value, v.source) for k, v in describe(server, "keep").items()}
        assert after == before, sig
        for key, value in all_configs.items():
            assert after[key] == (value, TOPIC_SOURCE), key
        assert len(consume(server.bootstrap, "keep", 5)) == 5


# ------------------------------------------------ server.properties files

KAFKA_PYTHON_STYLE = """\
# Modelled on kafka-python's servers/4.0.0/resources/kafka.properties.
process.roles=broker,controller
node.id=0
controller.quorum.bootstrap.servers=127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
inter.broker.listener.name=PLAINTEXT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=true
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={data}
num.partitions=2
default.replication.factor=1
replica.lag.time.max.ms=1000
replica.socket.timeout.ms=1000
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
log.cleaner.enable=false
offsets.commit.timeout.ms=500
offsets.topic.num.partitions=2
group.min.session.timeout.ms=1000
group.initial.rebalance.delay.ms=0
"""

TRIVUP_STYLE = """\
# Modelled on confluent-kafka's trivup KafkaBrokerApp (template + KRaft).
broker.id=1
port={port}
reserved.broker.max.id=65536
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},DOCKER://127.0.0.1:{dport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},DOCKER://127.0.0.1:{dport}
log.dir={data}
log.dirs={data}
num.partitions=3
auto.create.topics.enable=true
delete.topic.enable=true
default.replication.factor=1
security.inter.broker.protocol=PLAINTEXT
process.roles=broker,controller
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,DOCKER:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.quorum.voters=1@127.0.0.1:{cport}
"""


class FileServer(Server):
    """`sluice server --config FILE` and nothing else: the file names the
    listeners and the data folder."""

    def __init__(self, tmp_path, text, name):
        super().__init__(tmp_path / name)
        self.conf = tmp_path / f"{name}.properties"
        self.conf.write_text(text.format(port=self.port, cport=free_port(),
                                         dport=free_port(), data=self.data_dir))

    def start(self, timeout=30):
        log = open(self.log_path, "ab")
        env = dict(os.environ, RUST_LOG="info")
        self.proc = subprocess.Popen([BIN, "server", "--config", str(self.conf)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + timeout
        import socket
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sluice exited with {self.proc.returncode}: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sluice did not start listening: {self.log()}")


@pytest.fixture
def file_servers():
    started = []
    yield started
    for s in started:
        s.stop()


def test_kafka_python_fixture_properties_start_and_serve(tmp_path, file_servers):
    s = FileServer(tmp_path, KAFKA_PYTHON_STYLE, "kp")
    file_servers.append(s.start())
    produce(s.bootstrap, "fixture-topic", 4)
    assert len(consume(s.bootstrap, "fixture-topic", 4, partitions=2)) == 4
    # Auto-created with the file's num.partitions.
    md = admin(s).list_topics("fixture-topic", timeout=10)
    assert len(md.topics["fixture-topic"].partitions) == 2
    broker = describe(s, "0", ResourceType.BROKER)
    assert (broker["offsets.commit.timeout.ms"].value,
            broker["offsets.commit.timeout.ms"].source) == ("500", STATIC)
    assert broker["transaction.state.log.min.isr"].value == "1"
    assert broker["node.id"].value == "0"
    log = s.log()
    # One warning for the unknown key, one line for keys without effect.
    assert "allow.everyone.if.no.acl.found" in log
    assert "were supplied but are not used yet" in log
    assert log.count("have no effect in Sluice yet") == 1
    assert "share.coordinator.state.topic.min.isr" in log


def test_trivup_fixture_properties_start_and_serve(tmp_path, file_servers):
    s = FileServer(tmp_path, TRIVUP_STYLE, "trivup")
    file_servers.append(s.start())
    produce(s.bootstrap, "trivup-topic", 2)
    assert len(consume(s.bootstrap, "trivup-topic", 2, partitions=3)) == 2
    md = admin(s).list_topics(timeout=10)
    assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", s.port)}
    log = s.log()
    assert "reserved.broker.max.id" in log and "port" in log
    assert "DOCKER" in log  # the extra listener is reported, not served


def test_bad_value_of_a_known_key_stops_start_naming_it(tmp_path):
    conf = tmp_path / "bad.properties"
    conf.write_text(f"log.dirs={tmp_path / 'data'}\nnum.partitions=many\n")
    r = subprocess.run([BIN, "server", "--config", str(conf)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "num.partitions" in r.stderr and "many" in r.stderr, r.stderr
    conf.write_text(f"log.dirs={tmp_path / 'data'}\nlog.segment.bytes=1024\n")
    r = subprocess.run([BIN, "server", "--config", str(conf)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "log.segment.bytes" in r.stderr, r.stderr
