"""kafka-python 2.2 consumer groups against sluice: three members on a
6-partition topic with each of the range, roundrobin and sticky assignors.
Every partition has exactly one owner, committed records are consumed
exactly once across the group, and the partitions of a member that leaves
or stops heartbeating (SIGKILL) move to the others. Also the admin
client's group APIs, and the errors of a refused JoinGroup."""
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import KafkaError as CKafkaError
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.errors import (GroupIdNotFoundError, GroupMaxSizeReachedError,
                          InconsistentGroupProtocolError, InvalidSessionTimeoutError,
                          KafkaError, NoError, NonEmptyGroupError)
from kafka.structs import OffsetAndMetadata

from grouptools import Group, create_topic, three_member_flow

FAST = ("--override", "group.initial.rebalance.delay.ms=0")


def kp_admin(server):
    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky"])
def test_three_members(server_factory, tmp_path, assignor):
    server = server_factory(*FAST)
    a = kp_admin(server)
    try:
        def describe(group):
            """{client_id: sorted partitions} of a Stable group (DescribeGroups),
            {} for an Empty one, None while rebalancing."""
            (info,) = a.describe_consumer_groups([group])
            assert info.error_code == 0, info
            if info.state == "Empty":
                return {} if not info.members else None
            if info.state != "Stable":
                return None
            assert info.protocol_type == "consumer"
            assert info.protocol == assignor, info.protocol
            out = {}
            for m in info.members:
                parts = [p for topic, ps in m.member_assignment.assignment for p in ps]
                out[m.client_id] = sorted(parts)
            return out

        def committed(group, topic):
            offsets = a.list_consumer_group_offsets(group)
            return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic}

        three_member_flow(server, tmp_path, "kafka-python", assignor, describe, committed,
                          sticky=assignor == "sticky")
    finally:
        a.close()


def test_admin_groups(server_factory, tmp_path):
    """KafkaAdminClient: list, describe and delete groups, list offsets;
    an assign()-only consumer commits without joining (protocol type '')."""
    server = server_factory(*FAST)
    create_topic(server, "adm", 2)
    k = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="offsets-only",
                      enable_auto_commit=False)
    try:
        k.assign([TopicPartition("adm", 0), TopicPartition("adm", 1)])
        k.commit({TopicPartition("adm", 0): OffsetAndMetadata(5, "five", -1),
                  TopicPartition("adm", 1): OffsetAndMetadata(0, "", -1)})
    finally:
        k.close()
    a = kp_admin(server)
    try:
        with Group(server, tmp_path, "kafka-python", "live", "adm", assignor="roundrobin") as g:
            m = g.member("m")
            g.wait_balanced([m], 2, [2])
            assert sorted(a.list_consumer_groups()) == [("live", "consumer"), ("offsets-only", "")]
            live, idle, unknown = a.describe_consumer_groups(["live", "offsets-only", "unknown"])
            assert (live.error_code, live.state, live.protocol_type, live.protocol) == (
                0, "Stable", "consumer", "roundrobin")
            (member,) = live.members
            assert member.client_id == "m" and member.member_id.startswith("m-")
            assert member.member_metadata.subscription == ["adm"]
            assert member.member_assignment.assignment == [("adm", [0, 1])]
            assert (idle.state, idle.protocol_type, idle.members) == ("Empty", "", [])
            assert (unknown.error_code, unknown.state) == (0, "Dead")
            assert a.list_consumer_group_offsets("offsets-only") == {
                TopicPartition("adm", 0): OffsetAndMetadata(5, "five", -1),
                TopicPartition("adm", 1): OffsetAndMetadata(0, "", -1)}
            assert a.list_consumer_group_offsets("unknown") == {}
            assert dict(a.delete_consumer_groups(["offsets-only", "live", "unknown"])) == {
                "offsets-only": NoError, "live": NonEmptyGroupError,
                "unknown": GroupIdNotFoundError}
            assert a.list_consumer_groups() == [("live", "consumer")]
            assert a.list_consumer_group_offsets("offsets-only") == {}
            m.close()
        assert dict(a.delete_consumer_groups(["live"])) == {"live": NoError}
        assert a.list_consumer_groups() == []
    finally:
        a.close()


def test_join_errors(server_factory, tmp_path):
    """INVALID_SESSION_TIMEOUT, INCONSISTENT_GROUP_PROTOCOL (kafka-python and
    librdkafka) and GROUP_MAX_SIZE_REACHED, without disturbing the members."""
    server = server_factory(*FAST, "--override", "group.max.size=2",
                            "--override", "group.max.session.timeout.ms=20000")
    create_topic(server, "errs", 2)

    def join_error(timeout=15, **kw):
        k = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                          **{"heartbeat_interval_ms": 500, **kw})
        try:
            k.subscribe(["errs"])
            deadline = time.time() + timeout
            while time.time() < deadline:
                try:
                    k.poll(timeout_ms=200)
                except KafkaError as e:
                    return e
            return None
        finally:
            k.close()

    assert isinstance(join_error(group_id="short", session_timeout_ms=1000,
                                 heartbeat_interval_ms=300),
                      InvalidSessionTimeoutError)
    assert isinstance(join_error(group_id="long", session_timeout_ms=30_000),
                      InvalidSessionTimeoutError)
    with Group(server, tmp_path, "kafka-python", "full", "errs", assignor="range") as g:
        m1 = g.member("m1")
        g.wait_balanced([m1], 2, [2])
        # (With room in the group: as in Kafka, a full group answers
        # GROUP_MAX_SIZE_REACHED before looking at the protocols.)
        assert isinstance(join_error(group_id="full", partition_assignment_strategy=[
            RoundRobinPartitionAssignor]), InconsistentGroupProtocolError)
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "full",
                      "partition.assignment.strategy": "roundrobin", "log_level": 0,
                      "session.timeout.ms": 6000})
        try:
            c.subscribe(["errs"])
            errors = []
            deadline = time.time() + 15
            while not errors and time.time() < deadline:
                errors = [m.error() for m in c.consume(10, 0.2) if m.error() is not None]
            assert errors and errors[0].code() == CKafkaError.INCONSISTENT_GROUP_PROTOCOL, errors
        finally:
            c.close()
        assert m1.count("assign") == 1, g.info()
        assert [e["parts"] for e in m1.of("revoke")] in ([], [[]]), g.info()
        m2 = g.member("m2")
        g.wait_balanced([m1, m2], 2, [1, 1])
        callbacks = [(m.count("assign"), m.count("revoke")) for m in (m1, m2)]
        # A third member of a Stable group of two: refused, no rebalance.
        assert isinstance(join_error(group_id="full"), GroupMaxSizeReachedError)
        time.sleep(1.5)
        assert [(m.count("assign"), m.count("revoke")) for m in (m1, m2)] == callbacks
        assert [m.assignment for m in (m1, m2)] in ([[0], [1]], [[1], [0]])
