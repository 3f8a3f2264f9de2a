"""Kafka's split topology with `sluice server` processes (design 025):
three controller-only nodes (`process.roles=controller`, ids 1 to 3) and
two broker-only nodes (`process.roles=broker`, ids 4 and 5), started from
server.properties files with Kafka's keys only (tests/compat/cluster.py,
SplitCluster). confluent-kafka produces (idempotent, acks=all) and
consumes (a group) through the brokers while the quorum leader and then a
partition leader are SIGKILLed; `sluice cluster describe` shows the
controllers as voters and the brokers as observers and brokers."""
import re
import subprocess
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from cluster import SplitCluster
from conftest import BIN

TOPIC = "split"


def describe(cluster):
    """`sluice cluster describe` as {"brokers", "voters", "observers",
    "leader", "controller"}."""
    out = subprocess.run([BIN, "cluster", "describe", "--bootstrap-server", cluster.bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout

    def ids(kind):
        return sorted(int(m) for m in re.findall(rf"^{kind}: (\d+)\t", text, re.M))

    return {
        "brokers": ids("Broker"),
        "voters": ids("Voter"),
        "observers": ids("Observer"),
        "leader": int(re.search(r"QuorumLeaderId: (-?\d+)", text).group(1)),
        "controller": int(re.search(r"ControllerId: (-?\d+)", text).group(1)),
        "text": text,
    }


def produce(bootstrap, first, count):
    """`count` records acks=all, idempotent; every one must be delivered."""
    errors, acked = [], []

    def report(err, msg):
        (errors if err else acked).append(err or msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "log_level": 0})
    for i in range(first, first + count):
        p.produce(TOPIC, key=str(i % 7).encode(), value=f"v{i}".encode(), on_delivery=report)
        p.poll(0)
    assert p.flush(90) == 0, "records still undelivered"
    assert not errors, errors
    return {v.decode() for v in acked}


def test_controllers_and_brokers_in_separate_processes(tmp_path):
    cluster = SplitCluster(tmp_path, controllers=3, brokers=2,
                           broker_extra={"offsets.topic.replication.factor": "2",
                                         "offsets.topic.num.partitions": "4"}).start()
    try:
        # Only the brokers are brokers; the controllers vote, the brokers
        # observe the metadata log.
        cluster.wait_for(lambda: sorted(cluster.metadata().brokers) == [4, 5], "brokers 4 and 5 listed")
        cluster.wait_for(lambda: describe(cluster)["observers"] == [4, 5], "two observers")
        d = describe(cluster)
        assert d["brokers"] == [4, 5], d["text"]
        assert d["voters"] == [1, 2, 3], d["text"]
        assert d["leader"] in (1, 2, 3), d["text"]
        assert d["controller"] in (4, 5), d["text"]

        admin = cluster.admin()
        admin.create_topics([NewTopic(TOPIC, 2, 2)])[TOPIC].result(30)
        cluster.wait_for(lambda: all(sorted(cluster.partition(TOPIC, p)[2]) == [4, 5] for p in (0, 1)),
                         "both replicas in sync")
        sent = produce(cluster.bootstrap, 0, 200)

        # The quorum leader (a controller-only node) is SIGKILLed: the
        # brokers keep serving, and a topic created through them is
        # committed by the new leader.
        old = d["leader"]
        cluster.nodes[old].kill()
        sent |= produce(cluster.bootstrap, 200, 200)
        admin.create_topics([NewTopic("later", 1, 2)])["later"].result(60)
        cluster.wait_for(lambda: describe(cluster)["leader"] not in (-1, old), "a new quorum leader")

        # A partition leader (a broker-only node) is SIGKILLed: the other
        # broker takes over once the session times out.
        leader, _, _ = cluster.partition(TOPIC, 0)
        cluster.nodes[leader].kill()
        cluster.wait_for(lambda: cluster.partition(TOPIC, 0)[0] not in (-1, leader), "a new partition leader")
        sent |= produce(cluster.bootstrap, 400, 200)

        # Both come back and catch up.
        cluster.nodes[old].start().wait_listening()
        cluster.nodes[leader].start().wait_listening()
        cluster.wait_for(lambda: all(sorted(cluster.partition(TOPIC, p)[2]) == [4, 5] for p in (0, 1)),
                         "both replicas back in sync", timeout=90)
        cluster.wait_for(lambda: sorted(describe(cluster)["voters"]) == [1, 2, 3]
                         and describe(cluster)["observers"] == [4, 5], "the quorum whole again")

        # A group reads back every acknowledged record.
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g",
                      "auto.offset.reset": "earliest", "log_level": 0})
        c.subscribe([TOPIC])
        got = set()
        deadline = time.time() + 90
        while len(got) < len(sent) and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.add(m.value().decode())
        c.commit(asynchronous=False)
        c.close()
        assert got == sent, f"{len(sent - got)} acknowledged records not read back"
    finally:
        cluster.stop()


def test_role_misconfigurations_stop_the_server_naming_the_key(tmp_path):
    """Kafka's checks of `process.roles` at start: the process exits
    non-zero, naming the key, before writing anything."""
    voters = "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3"
    cases = [
        ({"process.roles": "controller", "node.id": "1",
          "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"},
         "configuration listeners: The listeners config must only contain KRaft controller listeners"),
        ({"process.roles": "controller", "node.id": "7", "listeners": "CONTROLLER://127.0.0.1:0"},
         "configuration node.id: If process.roles contains the 'controller' role, the node id 7 must be included"),
        ({"process.roles": "broker", "node.id": "2", "listeners": "PLAINTEXT://127.0.0.1:0"},
         "configuration node.id: If process.roles contains just the 'broker' role, the node id 2 must not be included"),
        ({"process.roles": "broker", "node.id": "4",
          "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"},
         "configuration controller.listener.names: controller.listener.names must not contain a value appearing"),
        ({"process.roles": "broker", "node.id": "4", "listeners": "PLAINTEXT://127.0.0.1:0",
          "controller.quorum.voters": ""},
         "configuration controller.quorum.voters:"),
    ]
    for i, (keys, expected) in enumerate(cases):
        props = {"controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
                 "log.dirs": str(tmp_path / f"data-{i}")}
        props.update(keys)
        path = tmp_path / f"bad-{i}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        out = subprocess.run([BIN, "server", "--config", str(path)], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode != 0, keys
        assert expected in out.stderr, (keys, out.stderr)
        assert not (tmp_path / f"data-{i}").exists(), keys
