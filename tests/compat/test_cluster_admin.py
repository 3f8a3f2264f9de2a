"""The cluster admin APIs driven by a real Kafka client against three
`sluice server` processes (issue #13, tests/compat/cluster.py), each with
two `log.dirs`: kafka-python 3's KafkaAdminClient (run by the
SLUICETEST_PYTHON_KP3 interpreter, tests/compat/cluster_admin_check.py)
and confluent-kafka's AdminClient.

- DescribeQuorum (`describe_metadata_quorum`): three voters, one of them
  leads, a high watermark, their controller endpoints.
- DescribeCluster (`describe_cluster`, both clients): the three brokers
  with their host and port, a controller id, one cluster id; a broker
  killed beyond `broker.session.timeout.ms` is fenced (listed as such to
  a v2 request that includes fenced brokers, left out otherwise).
- DescribeLogDirs and AlterReplicaLogDirs: a broker lists both folders
  with the topic's partitions; the leader's replica of a partition moves
  to its other folder, stays there across a SIGKILL and restart of that
  node, and the records written before are read back.
- ElectLeaders: with `auto.leader.rebalance.enable=false`, the preferred
  leader SIGKILLed and restarted does not lead again until a PREFERRED
  election for its partition; then the election is not needed, and an
  unknown partition or topic is UNKNOWN_TOPIC_OR_PARTITION.
- ListPartitionReassignments: none in progress (kafkajs moves partitions
  in tests/compat/test_kafkajs_reassign.py).
- Creating the topic logs no error on the nodes that follow it.
"""
import json
import os
import subprocess
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from cluster import SESSION_TIMEOUT_MS, Cluster

TOPIC = "admin"
PARTITIONS = 3
RECORDS = 50
ELECTION_NOT_NEEDED = 84
UNKNOWN_TOPIC_OR_PARTITION = 3
SCRIPT = Path(__file__).with_name("cluster_admin_check.py")


def kp3(cluster, *args):
    """One cluster_admin_check.py command run by kafka-python 3; its JSON."""
    py = os.environ.get("SLUICETEST_PYTHON_KP3")
    assert py, ("SLUICETEST_PYTHON_KP3 is not set: run scripts/test.sh, which installs "
                "tests/requirements-kafka-python3.txt into target/test-venv-kp3")
    run = subprocess.run([py, str(SCRIPT), cluster.bootstrap, *map(str, args)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (args, run.stderr[-4000:])
    return json.loads(run.stdout.strip().splitlines()[-1])


def folders(cluster, broker):
    """{partition of TOPIC: (folder, size)} on `broker`, and its folders,
    from kafka-python 3's describe_log_dirs."""
    got = kp3(cluster, "log-dirs", broker)["log_dirs"]
    assert [b["broker"] for b in got] == [broker], got
    where = {}
    for d in got[0]["log_dirs"]:
        assert d["error_code"] == 0, d
        assert d["total_bytes"] > 0 and d["usable_bytes"] > 0, d
        for t in d["topics"]:
            if t["name"] == TOPIC:
                for p in t["partitions"]:
                    assert not p["is_future_key"] and p["offset_lag"] == 0, p
                    where[p["partition_index"]] = (os.path.realpath(d["log_dir"]), p["partition_size"])
    return [os.path.realpath(d["log_dir"]) for d in got[0]["log_dirs"]], where


def produce(cluster, partition, count):
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 0})
    errors = []
    for i in range(count):
        p.produce(TOPIC, value=f"v{i}".encode(), partition=partition,
                  on_delivery=lambda err, _msg: err and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors


def meta_cluster_ids(cluster):
    """The cluster.id of every data folder of every node."""
    out = set()
    for n in cluster.nodes.values():
        for d in n.log_dirs:
            props = dict(line.split("=", 1) for line in (d / "meta.properties").read_text().splitlines()
                         if "=" in line and not line.startswith("#"))
            out.add(props["cluster.id"])
    return out


def test_kafka_python_3_drives_the_cluster_admin_apis(tmp_path):
    cluster = Cluster(tmp_path, extra={"auto.leader.rebalance.enable": "false"}, log_dirs=2).start()
    try:
        admin = cluster.admin()
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        ids = {n.id: n for n in cluster.nodes.values()}
        # Creating a topic is routine on every node: the nodes that follow
        # the change through the metadata log report no error for it (they
        # logged one per partition they lead, found before its log).
        for n in cluster.nodes.values():
            assert "no log for a partition this node leads" not in n.log_path.read_text(errors="replace"), n.log()

        # DescribeQuorum: the three combined nodes vote, one leads; every
        # voter has fetched up to a high watermark past the first records.
        info = kp3(cluster, "info")
        assert info["inferred"] == [4, 0], info
        q = info["quorum"]
        assert [t["topic_name"] for t in q["topics"]] == ["__cluster_metadata"], q
        part = q["topics"][0]["partitions"][0]
        assert part["partition_index"] == 0 and part["error"] is None, q
        assert part["high_watermark"] > 0, q
        voters = {v["replica_id"]: v for v in part["current_voters"]}
        assert sorted(voters) == [1, 2, 3], q
        assert part["leader_id"] in voters and part["leader_epoch"] > 0, q
        assert voters[part["leader_id"]]["log_end_offset"] >= part["high_watermark"], q
        assert part["observers"] == [], q
        assert {n["node_id"]: [(lis["name"], lis["host"], lis["port"]) for lis in n["listeners"]]
                for n in q["nodes"]} == {
            i: [("CONTROLLER", "127.0.0.1", n.controller_port)] for i, n in ids.items()}, q

        # DescribeCluster, kafka-python 3 (v2) and confluent-kafka: the
        # three brokers at their listeners, none fenced, a controller id.
        brokers = {i: ("127.0.0.1", n.port) for i, n in ids.items()}
        described = info["cluster"]
        assert {b["broker_id"]: (b["host"], b["port"]) for b in described["brokers"]} == brokers, described
        assert not any(b["is_fenced"] for b in described["brokers"]), described
        assert described["controller_id"] in brokers, described
        assert described["cluster_id"], described
        confluent = admin.describe_cluster(request_timeout=10).result()
        assert {n.id: (n.host, n.port) for n in confluent.nodes} == brokers
        assert confluent.controller is not None and confluent.controller.id in brokers
        # One cluster: both clients, and every data folder of every node.
        assert confluent.cluster_id == described["cluster_id"]
        assert meta_cluster_ids(cluster) == {described["cluster_id"]}

        # ListPartitionReassignments: nothing is moving.
        assert info["reassignments"] == {}, info

        # DescribeLogDirs: a broker lists both its folders; the topic's
        # three replicas on it are spread over them.
        metadata = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        moved = next(p for p in range(PARTITIONS) if metadata[p].replicas[0] != part["leader_id"])
        node = ids[metadata[moved].replicas[0]]
        assert metadata[moved].leader == node.id
        dirs, where = folders(cluster, node.id)
        assert dirs == [os.path.realpath(d) for d in node.log_dirs]
        assert sorted(where) == list(range(PARTITIONS))
        assert {d for d, _ in where.values()} == set(dirs)
        # Only the partition asked for, in every folder.
        only = kp3(cluster, "log-dirs", node.id, TOPIC, moved)["log_dirs"][0]["log_dirs"]
        assert len(only) == 2
        assert [(t["name"], p["partition_index"]) for d in only for t in d["topics"]
                for p in t["partitions"]] == [(TOPIC, moved)], only

        # AlterReplicaLogDirs: the leader's replica of `moved` goes to its
        # other folder, with the records written before.
        produce(cluster, moved, RECORDS)
        before = where[moved][0]
        size = folders(cluster, node.id)[1][moved][1]
        assert size > 0
        target = next(d for d in dirs if d != before)
        assert kp3(cluster, "move", node.id, TOPIC, moved, str(tmp_path / "nowhere"))["errors"] == [
            [TOPIC, moved, node.id, "LogDirNotFoundError"]]
        assert kp3(cluster, "move", node.id, TOPIC, moved, target)["errors"] == [
            [TOPIC, moved, node.id, "NoError"]]
        cluster.wait_for(lambda: folders(cluster, node.id)[1][moved] == (target, size),
                         "the replica in its new folder")
        assert kp3(cluster, "consume", TOPIC, moved)["values"] == [f"v{i}" for i in range(RECORDS)]

        # ElectLeaders: the preferred leader of `moved` is SIGKILLed; once
        # fenced another replica leads.
        node.kill()
        others = [n for n in cluster.nodes.values() if n is not node]
        cluster.wait_for(lambda: all(n.view(TOPIC)[moved][0] not in (-1, node.id) for n in others),
                         "another leader", timeout=SESSION_TIMEOUT_MS / 1000 + 30)
        # DescribeCluster leaves the fenced broker out, unless (v2,
        # KIP-1073) the request includes fenced brokers, as kafka-python 3's
        # does: then it is there, marked fenced.
        assert {n.id for n in admin.describe_cluster(request_timeout=10).result().nodes} == {
            n.id for n in others}
        fenced = kp3(cluster, "cluster")["cluster"]
        assert {b["broker_id"]: b["is_fenced"] for b in fenced["brokers"]} == {
            i: i == node.id for i in ids}, fenced

        # Restarted, it finds its replica in the new folder, catches up,
        # and does not lead: the automatic rebalance is off.
        node.start().wait_listening()
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        assert folders(cluster, node.id)[1][moved] == (target, size)
        assert all(n.view(TOPIC)[moved][0] != node.id for n in cluster.nodes.values())

        # A PREFERRED election for that partition gives it back.
        assert kp3(cluster, "elect", TOPIC, moved)["results"] == [[TOPIC, moved, 0, None]]
        cluster.wait_for(lambda: all(n.view(TOPIC)[moved][0] == node.id for n in cluster.nodes.values()),
                         "the preferred replica leading on every node")
        again = kp3(cluster, "elect-again", TOPIC, moved)
        assert kp3(cluster, "consume", TOPIC, moved)["values"] == [f"v{i}" for i in range(RECORDS)]

        # Once the preferred replica leads the election is not needed
        # (kafka-python does not raise ELECTION_NOT_NEEDED), for that
        # partition and for every other (kafka-python lists them all);
        # unknown partitions and topics are UNKNOWN_TOPIC_OR_PARTITION
        # (raised unless raise_errors=False).
        assert [r[:3] for r in again["not_needed"]] == [[TOPIC, moved, ELECTION_NOT_NEEDED]], again
        assert [r[:3] for r in again["all"] if r[0] == TOPIC] == [
            [TOPIC, p, ELECTION_NOT_NEEDED] for p in range(PARTITIONS)], again
        assert all(r[2] == ELECTION_NOT_NEEDED for r in again["all"]), again
        assert again["unknown_partition"] == [
            [TOPIC, 99, UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {TOPIC}-99"]], again
        assert [r[:3] for r in again["unknown_topic"]] == [
            ["no-such-topic", 0, UNKNOWN_TOPIC_OR_PARTITION]], again
        assert again["unknown_raised"][0] == "UnknownTopicOrPartitionError", again

        # Kafka's messages (ReplicationControlManager.electLeader's
        # ApiError): the error's own text for ELECTION_NOT_NEEDED, and the
        # topic named when the topic is unknown.
        not_needed = "Leader election not needed for topic partition."
        assert again["not_needed"][0][3] == not_needed, again
        assert all(r[3] == not_needed for r in again["all"]), again
        assert again["unknown_topic"][0][3] == "No such topic as no-such-topic", again
    finally:
        cluster.stop()
