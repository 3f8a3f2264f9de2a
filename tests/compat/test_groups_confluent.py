"""confluent-kafka (librdkafka 2.16) consumer groups against sluice: three
members with the range and cooperative-sticky assignors (exactly one owner
per partition, exactly-once consumption with commits, partitions moved on
leave and on a missed session timeout), static membership (KIP-345), and
the AdminClient's group APIs."""
import struct
import time

import pytest
from confluent_kafka import (OFFSET_INVALID, ConsumerGroupState, ConsumerGroupTopicPartitions,
                             KafkaError, KafkaException, TopicPartition)

import wire
from grouptools import (Group, admin, assert_exactly_once, create_topic, produce,
                        three_member_flow, wait_for)

FAST = ("--override", "group.initial.rebalance.delay.ms=0")
OFFSET_DELETE = 47
GROUP_ID_NOT_FOUND = 69
GROUP_SUBSCRIBED_TO_TOPIC = 86


def describer(a, assignor=None):
    def describe(group):
        """{client_id: sorted partitions} of a Stable group, {} for an Empty
        one, None otherwise."""
        d = a.describe_consumer_groups([group])[group].result(timeout=30)
        if d.state == ConsumerGroupState.EMPTY:
            return {} if not d.members else None
        if d.state != ConsumerGroupState.STABLE:
            return None
        if assignor is not None:
            assert d.partition_assignor == assignor, d.partition_assignor
        return {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
                for m in d.members}
    return describe


def committer(a):
    def committed(group, topic):
        (res,) = a.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)]).values()
        return {tp.partition: tp.offset for tp in res.result(timeout=30).topic_partitions
                if tp.topic == topic}
    return committed


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_three_members(server_factory, tmp_path, assignor):
    server = server_factory(*FAST)
    a = admin(server)
    three_member_flow(server, tmp_path, "confluent", assignor, describer(a, assignor),
                      committer(a), sticky=assignor == "cooperative-sticky")


def test_static_member_restart(server_factory, tmp_path):
    """KIP-345: a member with a group.instance.id that is killed and
    restarted within session.timeout.ms gets its partitions back, and the
    other members see no rebalance (no on_assign/on_revoke); the same for
    the leader; a second process with the same instance id fences the
    first (FENCED_INSTANCE_ID)."""
    server = server_factory(*FAST)
    topic, group = "static", "static-group"
    create_topic(server, topic, 6)
    a = admin(server)
    describe = describer(a, "range")
    with Group(server, tmp_path, "confluent", group, topic, assignor="range",
               session_timeout_ms=15000) as g:
        first = g.member("a", instance_id="instance-a")  # the leader
        g.wait_balanced([first], 6, [6])
        b, c = g.member("b", instance_id="instance-b"), g.member("c", instance_id="instance-c")
        everyone = [first, b, c]
        owners = g.wait_balanced(everyone, 6, [2, 2, 2])
        wait_for(lambda: describe(group) == owners, 20, "the broker's view of the assignment",
                 info=lambda: describe(group))
        d = a.describe_consumer_groups([group])[group].result(timeout=30)
        assert {m.client_id: m.group_instance_id for m in d.members} == {
            "a": "instance-a", "b": "instance-b", "c": "instance-c"}
        old_member_id = {m.client_id: m.member_id for m in d.members}["c"]

        values = produce(server, topic, "before", 300, 6)
        assert_exactly_once(everyone, values, info=g.info)
        callbacks = {m.name: (m.count("assign"), m.count("revoke")) for m in (first, b)}

        c.kill()
        c.start()  # same group.instance.id, well within the session timeout
        wait_for(lambda: c.of("assign", run=2), 12, "the restarted member's assignment",
                 info=g.info)
        assert c.of("assign", run=2)[0]["parts"] == owners["c"]
        wait_for(lambda: c.assignment == owners["c"], 10, "the restarted member polling",
                 info=g.info)
        values += produce(server, topic, "after", 300, 6)
        # It resumes from its commits: nothing of "before" again.
        assert_exactly_once(everyone, values, info=g.info)
        # Several heartbeat intervals: a rebalance would have reached a and b.
        time.sleep(2)
        assert {m.name: (m.count("assign"), m.count("revoke")) for m in (first, b)} == callbacks
        assert first.assignment == owners["a"] and b.assignment == owners["b"]
        d = a.describe_consumer_groups([group])[group].result(timeout=30)
        assert d.state == ConsumerGroupState.STABLE
        members = {m.client_id: m for m in d.members}
        assert members["c"].group_instance_id == "instance-c"
        assert members["c"].member_id != old_member_id  # the coordinator replaced it
        assert describe(group) == owners

        # The same for the leader (JoinGroup v9 answers a restarted static
        # leader with skip_assignment: it must not reassign).
        callbacks = {m.name: (m.count("assign"), m.count("revoke")) for m in (b, c)}
        first.kill()
        first.start()
        wait_for(lambda: first.of("assign", run=2), 12, "the restarted leader's assignment",
                 info=g.info)
        assert first.of("assign", run=2)[0]["parts"] == owners["a"]
        values += produce(server, topic, "leader", 300, 6)
        assert_exactly_once(everyone, values, info=g.info)
        time.sleep(1.5)
        assert {m.name: (m.count("assign"), m.count("revoke")) for m in (b, c)} == callbacks
        assert describe(group) == owners
        callbacks = {m.name: (m.count("assign"), m.count("revoke")) for m in (first, b)}

        # A second process with the same group.instance.id takes the place
        # over (still no rebalance); the first is fenced (FENCED_INSTANCE_ID,
        # fatal in librdkafka).
        twin = g.member("twin", instance_id="instance-c")
        wait_for(lambda: twin.assignment == owners["c"], 15, "the twin's assignment", info=g.info)
        wait_for(lambda: [e for e in c.of("error", run=2) if e["fatal"]], 15,
                 "the fenced member's fatal error", info=g.info)
        fatal = [e for e in c.of("error", run=2) if e["fatal"]][0]
        assert "fenced" in fatal["err"].lower(), fatal
        values += produce(server, topic, "twin", 300, 6)
        assert_exactly_once([first, b, c, twin], values, info=g.info)
        assert {p for p, _, v in twin.records()} == set(owners["c"])
        assert {m.name: (m.count("assign"), m.count("revoke")) for m in (first, b)} == callbacks


def offset_delete(server, group, topic, partitions):
    """A raw OffsetDelete v0 (no client here has one): returns
    (top-level error, {partition: error})."""
    def string(s):
        b = s.encode()
        return struct.pack(">h", len(b)) + b

    body = (string(group) + struct.pack(">i", 1) + string(topic)
            + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions))
    with wire.connect(server, timeout=15) as s:
        s.sendall(wire.frame(wire.header(OFFSET_DELETE, 0, 7) + body))
        resp = wire.recv_frame(s)
    cid, error, _throttle, ntopics = struct.unpack_from(">ihii", resp, 0)
    assert cid == 7
    pos, out = 14, {}
    for _ in range(ntopics):
        (n,) = struct.unpack_from(">h", resp, pos)
        pos += 2 + n
        (nparts,) = struct.unpack_from(">i", resp, pos)
        pos += 4
        for _ in range(nparts):
            p, e = struct.unpack_from(">ih", resp, pos)
            pos += 6
            out[p] = e
    return error, out


def test_admin_group_apis(server_factory, tmp_path):
    """AdminClient: list, describe and delete groups; list, alter and
    delete (OffsetDelete) committed offsets; the errors Kafka gives for
    a group with members and for unknown groups."""
    server = server_factory(*FAST)
    a = admin(server)
    topic = "adm"
    create_topic(server, topic, 3)
    produce(server, topic, "x", 300, 3)

    def offsets(group, partitions=None):
        req = ConsumerGroupTopicPartitions(
            group, None if partitions is None else [TopicPartition(topic, p) for p in partitions])
        res = a.list_consumer_group_offsets([req])[group].result(timeout=30)
        assert res.group_id == group
        for tp in res.topic_partitions:
            assert tp.error is None, tp
        return {tp.partition: (tp.offset, tp.metadata or "") for tp in res.topic_partitions
                if tp.topic == topic}

    def alter(group, commits):
        req = ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p, o) for p, o in commits.items()])
        return a.alter_consumer_group_offsets([req])[group].result(timeout=30)

    def alter_error(group, commits):
        """The error of a refused alter: librdkafka reports OffsetCommit's
        partition errors on the partitions (or raises for the request)."""
        try:
            res = alter(group, commits)
        except KafkaException as e:
            return e.args[0].code()
        errors = {tp.error.code() for tp in res.topic_partitions if tp.error is not None}
        assert len(errors) == 1, res.topic_partitions
        return errors.pop()

    def listing(**kw):
        res = a.list_consumer_groups(**kw).result(timeout=30)
        assert not res.errors, res.errors
        return {g.group_id: g for g in res.valid}

    # Offsets-only groups (no members): alter creates them, list reads back.
    for group in ("idle", "idle2"):
        res = alter(group, {0: 10, 1: 20, 2: 30})
        assert [(tp.partition, tp.offset, tp.error) for tp in res.topic_partitions] == [
            (0, 10, None), (1, 20, None), (2, 30, None)]
    assert offsets("idle") == {0: (10, ""), 1: (20, ""), 2: (30, "")}
    assert offsets("idle", [1]) == {1: (20, "")}
    alter("idle", {1: 25})
    assert offsets("idle", [0, 1]) == {0: (10, ""), 1: (25, "")}
    assert offsets("never-committed", [0]) == {0: (OFFSET_INVALID, "")}

    with Group(server, tmp_path, "confluent", "live", topic, assignor="range") as g:
        m = g.member("m")
        g.wait_balanced([m], 3, [3])
        assert_exactly_once([m], [f"x-{i}" for i in range(300)], info=g.info)

        groups = listing()
        assert {"idle", "idle2", "live"} <= set(groups), groups
        assert groups["live"].state == ConsumerGroupState.STABLE
        assert not groups["live"].is_simple_consumer_group
        assert groups["idle"].state == ConsumerGroupState.EMPTY
        assert groups["idle"].is_simple_consumer_group  # no protocol type: offsets only
        assert set(listing(states={ConsumerGroupState.STABLE})) == {"live"}
        assert {"idle", "idle2"} <= set(listing(states={ConsumerGroupState.EMPTY}))
        assert "live" not in listing(states={ConsumerGroupState.EMPTY})

        fs = a.describe_consumer_groups(["live", "idle"])
        live, idle = fs["live"].result(timeout=30), fs["idle"].result(timeout=30)
        assert live.state == ConsumerGroupState.STABLE
        assert live.partition_assignor == "range"
        assert not live.is_simple_consumer_group
        assert live.coordinator.port == server.port
        (member,) = live.members
        assert member.client_id == "m" and member.member_id.startswith("m-")
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1, 2]
        assert idle.state == ConsumerGroupState.EMPTY and not idle.members

        # A group with members: its offsets cannot be altered from outside,
        # it cannot be deleted, nor its offsets of a subscribed topic.
        assert alter_error("live", {0: 0}) == KafkaError.UNKNOWN_MEMBER_ID
        with pytest.raises(KafkaException) as e:
            a.delete_consumer_groups(["live"])["live"].result(timeout=30)
        assert e.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, e.value
        assert offset_delete(server, "live", topic, [0]) == (0, {0: GROUP_SUBSCRIBED_TO_TOPIC})
        assert offsets("live") == {p: (100, "") for p in range(3)}
        m.close()  # LeaveGroup: now the group is empty
        wait_for(lambda: listing()["live"].state == ConsumerGroupState.EMPTY, 20,
                 "the group to be empty after its member left", info=g.info)

    # OffsetDelete on an empty group removes just the given partitions.
    assert offset_delete(server, "idle2", topic, [0, 2]) == (0, {0: 0, 2: 0})
    assert offsets("idle2") == {1: (20, "")}
    assert offset_delete(server, "nobody", topic, [0])[0] == GROUP_ID_NOT_FOUND

    # DeleteGroups: the empty groups go, with their offsets.
    fs = a.delete_consumer_groups(["idle", "live"])
    for f in fs.values():
        assert f.result(timeout=30) is None
    with pytest.raises(KafkaException) as e:
        a.delete_consumer_groups(["nobody"])["nobody"].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND, e.value
    assert not {"idle", "live"} & set(listing())
    assert "idle2" in listing()
    assert offsets("idle", [0, 1, 2]) == {p: (OFFSET_INVALID, "") for p in range(3)}
