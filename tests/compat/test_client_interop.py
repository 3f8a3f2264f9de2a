"""The sluice client (through the `sluice` CLI) and real Kafka clients
(kafka-python 2.2, confluent-kafka / librdkafka 2.16) on one broker:
records produced by one side are read unchanged by the other (keys, values,
headers, partitions, offsets, timestamps, every codec), keys land on the
same partitions, and the CLI consumer shares consumer groups with
kafka-python (range) and confluent-kafka (cooperative-sticky), each side
as group leader."""
import threading
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka import Consumer as CConsumer
from confluent_kafka import Producer as CProducer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.partitioner.default import DefaultPartitioner

import cli

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# Join at once instead of waiting group.initial.rebalance.delay.ms (3 s).
FAST = ("--override", "group.initial.rebalance.delay.ms=0")


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(cond, timeout, what, info=None, interval=0.05):
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() >= deadline:
            extra = f"\n{info()}" if info else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)


def kp_partition(key, partitions):
    """The partition kafka-python's DefaultPartitioner picks for `key`."""
    parts = list(range(partitions))
    return DefaultPartitioner()(key, parts, parts)


def segment_codecs(server, topic, partitions):
    """The compression codecs of all batches on disk (via `sluice dump-log`)."""
    codecs = set()
    for p in range(partitions):
        d = server.data_dir / f"{topic}-{p}"
        for log in sorted(d.glob("*.log")):
            out = cli.run(["dump-log", log]).stdout.decode()
            for line in out.splitlines():
                if "compresscodec:" in line:
                    codecs.add(line.split("compresscodec:")[1].split()[0])
    return codecs


# ---- 1. sluice produce -> kafka-python and confluent-kafka ----------------------

@pytest.mark.parametrize("codec", CODECS)
def test_sluice_produce_read_by_kafka_clients(server, codec):
    topic = unique(f"to-kafka-{codec}")
    partitions, n = 6, 1000
    cli.create_topic(server, topic, partitions)
    lines = [f"key-{i}:value {i}: with colon" for i in range(n)]
    header_value = f"interop-{codec}"
    cli.produce(server, topic, lines, "--key-separator", ":", "--header", f"trace={header_value}",
                "--header", "origin=sluice-cli", "--compression", codec)
    expected = {b"key-%d" % i: b"value %d: with colon" % i for i in range(n)}
    want_headers = [("trace", header_value.encode()), ("origin", b"sluice-cli")]

    # The CLI really used the codec (the broker keeps producer batches).
    assert segment_codecs(server, topic, partitions) == {codec}

    # kafka-python, subscribed without a group (all partitions, from earliest).
    kc = KafkaConsumer(topic, bootstrap_servers=server.bootstrap, group_id=None,
                       auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=2000)
    got = []
    deadline = time.time() + 30
    try:
        while len(got) < n and time.time() < deadline:
            for recs in kc.poll(timeout_ms=300, max_records=2000).values():
                got.extend(recs)
        extra = [r for recs in kc.poll(timeout_ms=200).values() for r in recs]
    finally:
        kc.close()
    assert len(got) == n and not extra, f"kafka-python read {len(got)} + {len(extra)} of {n}"
    assert {r.key: r.value for r in got} == expected
    assert all(r.headers == want_headers for r in got), [r.headers for r in got[:3]]
    bad = [(r.key, r.partition, kp_partition(r.key, partitions)) for r in got
           if r.partition != kp_partition(r.key, partitions)]
    assert not bad, f"keys on another partition than kafka-python's DefaultPartitioner: {bad[:5]}"
    by_partition = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert len(by_partition) == partitions
    for p, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), p
    # Lines of one partition keep their stdin order.
    for p in by_partition:
        seq = [int(r.key[4:]) for r in sorted(got, key=lambda r: r.offset) if r.partition == p]
        assert seq == sorted(seq), p
    kp_positions = {(r.partition, r.offset): r.key for r in got}

    # confluent-kafka, assign() from the beginning.
    cc = CConsumer({"bootstrap.servers": server.bootstrap, "group.id": unique("unused"),
                    "enable.auto.commit": False, "enable.auto.offset.store": False})
    msgs = []
    try:
        cc.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.time() + 30
        while len(msgs) < n and time.time() < deadline:
            for m in cc.consume(num_messages=n, timeout=0.3):
                assert m.error() is None, m.error()
                msgs.append(m)
        extra = cc.consume(num_messages=10, timeout=0.2)
    finally:
        cc.close()
    assert len(msgs) == n and not extra, f"confluent read {len(msgs)} + {len(extra)} of {n}"
    assert {m.key(): m.value() for m in msgs} == expected
    assert all(m.headers() == want_headers for m in msgs), [m.headers() for m in msgs[:3]]
    assert {(m.partition(), m.offset()): m.key() for m in msgs} == kp_positions


# ---- 2. kafka-python / confluent-kafka -> sluice consume ----------------------

def kafka_python_produce(server, topic, codec, n):
    """Returns {(partition, offset): (key, value, headers, timestamp)}."""
    p = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=5,
                      compression_type=None if codec == "none" else codec)
    futures = []
    for i in range(n):
        key = None if i % 10 == 3 else b"kp-key-%d" % i
        value = b"" if i % 25 == 0 else f"kafka-python värde {i} €".encode()
        headers = [("src", b"kafka-python"), ("i", str(i).encode())]
        if i % 7 == 0:
            headers.append(("empty", b""))
        futures.append((key, value, headers, p.send(topic, key=key, value=value,
                                                    headers=headers)))
    p.flush(30)
    out = {}
    for key, value, headers, f in futures:
        md = f.get(timeout=10)
        out[(md.partition, md.offset)] = (key, value, headers, md.timestamp)
    p.close()
    return out


def confluent_produce(server, topic, codec, n):
    p = CProducer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5,
                   "compression.type": codec})
    out, failed = {}, []

    def delivered(key, value, headers):
        # Delivery reports carry no headers: remember what was sent.
        def on_delivery(err, msg):
            if err is not None:
                failed.append(err)
                return
            assert (msg.key(), msg.value()) == (key, value)
            out[(msg.partition(), msg.offset())] = (key, value, headers, msg.timestamp()[1])
        return on_delivery

    for i in range(n):
        key = None if i % 10 == 3 else b"cf-key-%d" % i
        value = None if i % 50 == 1 else (b"" if i % 25 == 0
                                          else f"confluent värde {i} €".encode())
        headers = [("src", b"confluent"), ("i", str(i).encode())]
        if i % 7 == 0:
            headers.append(("none", None))
        p.produce(topic, key=key, value=value, headers=headers,
                  on_delivery=delivered(key, value, headers))
        p.poll(0)
    assert p.flush(30) == 0
    assert not failed, failed[:3]
    assert len(out) == n
    return out


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_clients_read_by_sluice_consume(server, client, codec):
    topic = unique(f"from-{client}-{codec}")
    partitions, n = 3, 300
    cli.create_topic(server, topic, partitions)
    produce = kafka_python_produce if client == "kafka-python" else confluent_produce
    sent = produce(server, topic, codec, n)
    assert len(sent) == n
    codecs = segment_codecs(server, topic, partitions)
    if codec == "none":
        assert codecs == {"none"}
    else:
        # kafka-python (DefaultRecordBatchBuilder._maybe_compress) sends a
        # batch uncompressed when compressing would not make it smaller,
        # as a batch of one short record can be when linger.ms cuts it.
        assert codec in codecs and codecs <= {codec, "none"}, codecs

    recs = cli.consume_json(server, topic, n)
    got = {}
    for r in recs:
        assert r.topic == topic, r
        assert (r.partition, r.offset) not in got, f"duplicate {r}"
        got[(r.partition, r.offset)] = r
    assert set(got) == set(sent)
    for pos, (key, value, headers, ts) in sent.items():
        r = got[pos]
        assert (r.key, r.value) == (key, value), (pos, r)
        assert r.headers == [(k.encode(), v) for k, v in headers], (pos, r)
        assert r.timestamp == ts, (pos, r)
        assert r.obj.get("timestamp_type", "CreateTime") == "CreateTime", r


# ---- 3. the same key, the same partition ---------------------------------------

def test_same_partitioner(server):
    partitions = 7
    keys = [b""] + ["user-%d-%s" % (i, "x" * (i % 5)) for i in range(300)]
    keys = [k if isinstance(k, bytes) else k.encode() for k in keys]
    keys.append("ключ-ü".encode())
    a, b, c = unique("part-kp"), unique("part-sluice"), unique("part-confluent")
    for t in (a, b, c):
        cli.create_topic(server, t, partitions)

    p = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=5)
    for k in keys:
        p.send(a, key=k, value=b"v-" + k)
    p.flush(30)
    p.close()

    cli.produce(server, b, [k + b"\x1fv-" + k for k in keys], "--key-separator", "\x1f")

    cp = CProducer({"bootstrap.servers": server.bootstrap, "partitioner": "murmur2_random",
                    "linger.ms": 5})
    confluent_keys = [k for k in keys if k]  # librdkafka treats an empty key like no key
    for k in confluent_keys:
        cp.produce(c, key=k, value=b"v-" + k)
    assert cp.flush(30) == 0

    def placement(topic, n):
        recs = cli.consume_json(server, topic, n)
        out = {}
        for r in recs:
            assert r.value == b"v-" + r.key, r
            assert r.key not in out, f"duplicate key {r}"
            out[r.key] = r.partition
        return out

    in_a, in_b = placement(a, len(keys)), placement(b, len(keys))
    in_c = placement(c, len(confluent_keys))
    expected = {k: kp_partition(k, partitions) for k in keys}
    assert len(set(expected.values())) == partitions
    assert in_a == expected
    diff = {k: (in_a[k], in_b.get(k)) for k in keys if in_a[k] != in_b.get(k)}
    assert not diff, f"kafka-python vs sluice partition differs for {len(diff)} keys: {list(diff.items())[:5]}"
    diff = {k: (in_a[k], in_c[k]) for k in confluent_keys if in_a[k] != in_c[k]}
    assert not diff, f"kafka-python vs librdkafka murmur2 differs: {list(diff.items())[:5]}"


# ---- 4./5. shared consumer groups ----------------------------------------------

class KafkaPythonMember:
    """A kafka-python group member polled by its own thread (the consumer
    is used by that thread only)."""
    name = "kafka-python"

    def __init__(self, server, topic, group, strategy, client_id):
        self.client_id = client_id
        self.consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap, group_id=group, client_id=self.client_id,
            auto_offset_reset="earliest", enable_auto_commit=True, auto_commit_interval_ms=500,
            partition_assignment_strategy=strategy, session_timeout_ms=10000,
            heartbeat_interval_ms=500)
        self.consumer.subscribe([topic])
        self.lock = threading.Lock()
        self.records = []
        self.assignment = set()
        self.history = []
        self.error = None
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self.stopping:
                batch = self.consumer.poll(timeout_ms=100)
                got = [(r.partition, r.offset, r.key, r.value)
                       for recs in batch.values() for r in recs]
                assignment = {tp.partition for tp in self.consumer.assignment()}
                with self.lock:
                    self.records.extend(got)
                    if assignment != self.assignment:
                        self.history.append(sorted(assignment))
                    self.assignment = assignment
        except Exception as e:  # reported by the test
            self.error = e
        finally:
            self.consumer.close()

    def snapshot(self):
        with self.lock:
            return list(self.records), set(self.assignment)

    def stop(self):
        self.stopping = True
        self.thread.join(30)
        assert self.error is None, f"kafka-python member failed: {self.error!r}"


class ConfluentMember:
    name = "confluent"

    def __init__(self, server, topic, group, strategy, client_id):
        self.client_id = client_id
        self.consumer = CConsumer({
            "bootstrap.servers": server.bootstrap, "group.id": group, "client.id": self.client_id,
            "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "auto.commit.interval.ms": 500, "partition.assignment.strategy": strategy,
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        self.consumer.subscribe([topic])
        self.lock = threading.Lock()
        self.records = []
        self.assignment = set()
        self.history = []
        self.error = None
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self.stopping:
                msgs = self.consumer.consume(num_messages=500, timeout=0.1)
                got = []
                for m in msgs:
                    if m.error() is not None:
                        raise RuntimeError(str(m.error()))
                    got.append((m.partition(), m.offset(), m.key(), m.value()))
                assignment = {tp.partition for tp in self.consumer.assignment()}
                with self.lock:
                    self.records.extend(got)
                    if assignment != self.assignment:
                        self.history.append(sorted(assignment))
                    self.assignment = assignment
        except Exception as e:
            self.error = e
        finally:
            self.consumer.close()

    snapshot = KafkaPythonMember.snapshot
    stop = KafkaPythonMember.stop


def describe_group(admin, group):
    """(state, protocol, {client_id: sorted partitions}, member ids by client)."""
    (info,) = admin.describe_consumer_groups([group])
    members, ids = {}, {}
    for m in info.members:
        parts = []
        # kafka-python leaves an empty assignment (mid-rebalance) as b"".
        if m.member_assignment and not isinstance(m.member_assignment, bytes):
            parts = [p for _topic, ps in m.member_assignment.assignment for p in ps]
        members[m.client_id] = sorted(parts)
        ids[m.client_id] = m.member_id
    return info.state, info.protocol, members, ids


def produce_keyed(server, topic, n, tag):
    """kafka-python produces `n` keyed records; returns {(p, o): (key, value)}."""
    p = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=5)
    futures = [(b"%s-key-%d" % (tag, i), b"%s-value-%d" % (tag, i)) for i in range(n)]
    futures = [(k, v, p.send(topic, key=k, value=v)) for k, v in futures]
    p.flush(30)
    out = {}
    for k, v, f in futures:
        md = f.get(timeout=10)
        out[(md.partition, md.offset)] = (k, v)
    p.close()
    return out


def shared_group_flow(server, tmp_path, member_cls, strategy, protocol, sluice_first,
                      sluice_args=()):
    topic, group = unique("shared-topic"), unique("shared")
    partitions = 4
    # Member ids start with the client id ("sluice-cli-" for the CLI), and
    # range orders members by member id: sort the other client before the
    # CLI in one case and after it in the other.
    client_id = f"{'zz' if sluice_first else 'aa'}-{member_cls.name}"
    cli.create_topic(server, topic, partitions)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    sluice = other = None
    try:
        def start_sluice():
            return cli.BackgroundConsumer(server, topic, "--group", group, "--from-beginning",
                                          *sluice_args, log_dir=tmp_path)

        def info():
            parts = []
            if sluice is not None:
                parts.append(sluice.info())
            if other is not None:
                parts.append(f"{other.name}: assignment history {other.history}, "
                             f"error {other.error!r}")
            try:
                parts.append(f"group: {describe_group(admin, group)}")
            except Exception as e:  # noqa: BLE001 - diagnostics only
                parts.append(f"describe failed: {e!r}")
            return "\n".join(parts)

        def alone(client_prefix):
            state, proto, members, _ = describe_group(admin, group)
            return (state == "Stable" and len(members) == 1
                    and all(c.startswith(client_prefix) for c in members)
                    and list(members.values()) == [list(range(partitions))])

        if sluice_first:
            sluice = start_sluice()
            wait_for(lambda: alone("sluice"), 20, "the sluice consumer alone in the group",
                     info)
            other = member_cls(server, topic, group, strategy, client_id)
        else:
            other = member_cls(server, topic, group, strategy, client_id)
            wait_for(lambda: other.snapshot()[1] == set(range(partitions)), 20,
                     f"{other.name} alone with all partitions", info)
            sluice = start_sluice()

        def balanced():
            state, proto, members, _ = describe_group(admin, group)
            if state != "Stable" or len(members) != 2:
                return None
            if sorted(len(p) for p in members.values()) != [2, 2]:
                return None
            mine = members.get(other.client_id)
            if mine is None or set(mine) != other.snapshot()[1]:
                return None
            return proto, members

        proto, members = wait_for(balanced, 30, "two members with two partitions each", info)
        assert proto == protocol, info()
        _, _, _, ids = describe_group(admin, group)
        sluice_client = next(c for c in members if c != other.client_id)
        assert sluice_client.startswith("sluice"), members
        other_parts = set(members[other.client_id])
        sluice_parts = set(members[sluice_client])
        assert other_parts.isdisjoint(sluice_parts)
        assert other_parts | sluice_parts == set(range(partitions))
        if protocol == "range":
            # Range: members sorted by member id get consecutive partitions.
            first = min(ids, key=ids.get)
            assert members[first] == [0, 1], (ids, members)

        sent = produce_keyed(server, topic, 400, b"a")
        assert {p for p, _ in sent} == set(range(partitions))

        def all_read():
            mine, _ = other.snapshot()
            theirs = sluice.snapshot()
            return len(mine) + len(theirs) >= len(sent)

        wait_for(all_read, 30, "all 400 records read by the two members", info)
        time.sleep(0.3)  # anything extra (duplicates) would show up now
        mine, _ = other.snapshot()
        theirs = sluice.snapshot()
        mine_pos = [(p, o) for p, o, _k, _v in mine]
        theirs_pos = [(r.partition, r.offset) for r in theirs]
        assert len(set(mine_pos)) == len(mine_pos), "duplicates in " + other.name
        assert len(set(theirs_pos)) == len(theirs_pos), "duplicates in sluice consume"
        assert set(mine_pos).isdisjoint(theirs_pos), "a record read by both members"
        assert set(mine_pos) | set(theirs_pos) == set(sent), info()
        assert len(mine_pos) + len(theirs_pos) == 400
        for p, o, k, v in mine:
            assert sent[(p, o)] == (k, v)
        for r in theirs:
            assert sent[(r.partition, r.offset)] == (r.key, r.value), r
            assert r.topic == topic
        assert {p for p, _ in mine_pos} == other_parts
        assert {p for p, _ in theirs_pos} == sluice_parts

        # SIGTERM: the CLI closes its consumer (commit, LeaveGroup) and exits
        # 0; the other member takes over well before the CLI's 45 s session
        # timeout could expire.
        stopped_at = time.time()
        code = sluice.stop()
        assert code == 0, info()
        assert f"Processed a total of {len(theirs)} messages" in sluice.stderr(), info()
        wait_for(lambda: other.snapshot()[1] == set(range(partitions)), 15,
                 f"{other.name} to own all partitions after the sluice consumer left", info)
        takeover = time.time() - stopped_at
        wait_for(lambda: (lambda s: s[0] == "Stable" and len(s[2]) == 1)(
            describe_group(admin, group)), 10, "a stable group of one", info)

        # What the CLI printed was committed on close: the survivor goes on
        # from there and reads only the new records.
        before = len(other.snapshot()[0])
        more = produce_keyed(server, topic, 40, b"b")
        wait_for(lambda: len(other.snapshot()[0]) >= before + len(more), 20,
                 f"{other.name} to read the 40 new records", info)
        time.sleep(0.3)
        after = [(p, o) for p, o, _k, _v in other.snapshot()[0][before:]]
        reread = sorted(set(after) & set(theirs_pos))
        assert not reread, (f"{other.name} re-read {len(reread)} records the sluice consumer "
                            f"had printed (offsets not committed on close?): {reread[:5]}")
        assert sorted(after) == sorted(more), info()
        if protocol == "cooperative-sticky":
            # Incremental rebalancing: the confluent member never gave up
            # all its partitions, and kept the ones it had throughout.
            assert all(other.history), other.history
            assert [h for h in other.history if len(h) == 2] == [sorted(other_parts)], \
                other.history
        return takeover
    finally:
        if sluice is not None and sluice.returncode is None:
            sluice.stop()
        if other is not None:
            other.stop()
        admin.close()


@pytest.mark.parametrize("first", ["sluice-first", "kafka-python-first"])
def test_shared_group_range_kafka_python(server_factory, tmp_path, first):
    server = server_factory(*FAST)
    shared_group_flow(server, tmp_path, KafkaPythonMember, [RangePartitionAssignor], "range",
                      sluice_first=first == "sluice-first")


def test_shared_group_roundrobin_kafka_python(server_factory, tmp_path):
    """`sluice consume --assignor roundrobin` and kafka-python's
    RoundRobinPartitionAssignor share a group."""
    server = server_factory(*FAST)
    shared_group_flow(server, tmp_path, KafkaPythonMember, [RoundRobinPartitionAssignor],
                      "roundrobin", sluice_first=True, sluice_args=("--assignor", "roundrobin"))


@pytest.mark.parametrize("first", ["sluice-first", "confluent-first"])
def test_shared_group_cooperative_sticky_confluent(server_factory, tmp_path, first):
    """The CLI runs with its default assignors, range then
    cooperative-sticky (Kafka 4's default), so next to a confluent member
    that only offers cooperative-sticky the group must choose
    cooperative-sticky (the eager-to-cooperative upgrade mix)."""
    server = server_factory(*FAST)
    shared_group_flow(server, tmp_path, ConfluentMember, "cooperative-sticky",
                      "cooperative-sticky", sluice_first=first == "sluice-first")
