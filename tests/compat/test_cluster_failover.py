"""Failover in a three-node cluster (issue #13), with real clients, checked
the way Jepsen's Kafka workload checks a log.

Three `sluice server` processes (tests/compat/cluster.py) hold a topic
with replication factor 3 and `min.insync.replicas=2`. While an idempotent
acks=all confluent-kafka producer, an idempotent acks=all sluice-client
producer (`sluice produce`) and a confluent-kafka consumer group (manual
commits) run, the test SIGKILLs the leader of a partition and restarts it,
SIGSTOPs a follower beyond `replica.lag.time.max.ms` and resumes it, and
SIGKILLs the metadata quorum's leader and restarts it. Afterwards:

- every acknowledged record is in the log, at the offset it was
  acknowledged at (no acknowledged write lost);
- no offset holds two different records (what the group polled at an
  offset is what the log holds there);
- no record is in the log twice (idempotence across failovers);
- each consumer's polls of a partition move forward between rebalances;
- the group's committed offsets are at least those whose commit was
  acknowledged (they survive the loss of the coordinator's node).

Before the faults, every node reports one cluster id (they format apart on
first start from the same `controller.quorum.voters`).
"""
import signal
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster import LAG_TIME_MS, Cluster
from jepsen import PARTITIONS, TOPIC, ConfluentProducer, GroupConsumer, SluiceProducer, check


def test_no_acknowledged_record_is_lost_across_kills_pauses_and_controller_failover(tmp_path):
    cluster = Cluster(tmp_path).start()
    try:
        # The nodes formatted apart on first start, and are one cluster.
        ids = {n.id: AdminClient({"bootstrap.servers": n.bootstrap}).list_topics(timeout=10).cluster_id
               for n in cluster.nodes.values()}
        assert len(set(ids.values())) == 1, f"every node reports one cluster id: {ids}"

        admin = cluster.admin()
        futures = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])
        futures[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC, PARTITIONS)

        confluent = ConfluentProducer(cluster.bootstrap)
        sluice = SluiceProducer(cluster.bootstrap)
        group = GroupConsumer(cluster.bootstrap)
        for t in (confluent, sluice, group):
            t.start()
        cluster.wait_for(lambda: len(confluent.acked) > 500 and len(group.polled) > 200, "traffic")

        # 1. The leader of partition 0 is SIGKILLed; a follower from the
        # ISR takes over; the node restarts and catches up.
        leader, _, _ = cluster.partition(TOPIC, 0)
        killed = cluster.nodes[leader]
        killed.kill()
        cluster.wait_for(lambda: cluster.partition(TOPIC, 0)[0] not in (-1, leader), "a new leader of partition 0")
        acked_before = len(confluent.acked)
        cluster.wait_for(lambda: len(confluent.acked) > acked_before + 300, "acks=all after the failover")
        killed.start()
        cluster.wait_full_isr(TOPIC, PARTITIONS)

        # 2. A follower of partition 1 stops (SIGSTOP) beyond the lag time:
        # it leaves the ISR (and, silent, is fenced); resumed, it catches up.
        leader, replicas, _ = cluster.partition(TOPIC, 1)
        follower = cluster.nodes[next(r for r in replicas if r != leader)]
        follower.signal(signal.SIGSTOP)
        cluster.wait_for(lambda: follower.id not in cluster.partition(TOPIC, 1)[2], "the paused follower out of the ISR")
        time.sleep(LAG_TIME_MS / 1000)
        acked_before = len(confluent.acked)
        cluster.wait_for(lambda: len(confluent.acked) > acked_before + 300, "acks=all without the paused follower")
        follower.signal(signal.SIGCONT)
        cluster.wait_full_isr(TOPIC, PARTITIONS)

        # 3. The metadata quorum's leader (the controller clients are told
        # of) is SIGKILLed and restarted.
        controller = cluster.nodes[cluster.metadata().controller_id]
        controller.kill()
        cluster.wait_for(lambda: cluster.metadata().controller_id not in (-1, controller.id), "a new quorum leader")
        acked_before = len(confluent.acked)
        cluster.wait_for(lambda: len(confluent.acked) > acked_before + 300, "acks=all after the controller failover")
        controller.start()
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        polled_before = len(group.polled)
        cluster.wait_for(lambda: len(group.polled) > polled_before + 300, "the group consuming again")

        confluent.stop.set()
        confluent.join(180)
        code, err = sluice.finish()
        assert code == 0, f"sluice produce failed: {err}"
        total = len(confluent.acked) + sluice.sent
        cluster.wait_for(lambda: len(group.polled) >= total * 0.9, "the group catching up")
        group.stop.set()
        group.join(60)

        print(check(cluster, confluent, sluice, group))
    finally:
        cluster.stop()


def coordinator_partition(key, partitions):
    """Kafka's `Utils.abs(key.hashCode()) % partitions`."""
    units = key.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def test_transactions_commit_across_nodes_and_survive_the_coordinators_loss(tmp_path):
    """A confluent-kafka transactional producer writes to three partitions
    led by the three nodes (markers go to each leader); the node of its
    transaction coordinator is SIGKILLed mid-way. Committed transactions
    are read_committed-visible exactly once, aborted ones never."""
    from confluent_kafka import KafkaError

    cluster = Cluster(tmp_path, extra={"transaction.state.log.num.partitions": "5"}).start()
    try:
        admin = cluster.admin()
        admin.create_topics([NewTopic("txn-out", 3, 3, config={"min.insync.replicas": "2"})])["txn-out"].result(30)
        cluster.wait_full_isr("txn-out", 3)
        leaders = {cluster.partition("txn-out", p)[0] for p in range(3)}
        assert len(leaders) == 3, f"partitions not spread over the nodes: {leaders}"

        txn_id = "failover-txn"
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                             "transaction.timeout.ms": 30_000, "message.timeout.ms": 30_000, "log_level": 0})
        producer.init_transactions(60)
        committed, aborted = [], []

        def run(t):
            """One transaction, committed or (every fifth) aborted."""
            producer.begin_transaction()
            for p in range(3):
                for i in range(10):
                    producer.produce("txn-out", value=b"t-%d-%d-%d" % (t, p, i), partition=p)
            if t % 5 == 4:
                # Delivered first, so the partitions are registered with
                # the coordinator before EndTxn(ABORT). Without it,
                # librdkafka sends EndTxn after any failed or retried
                # AddPartitionsToTxn (say CONCURRENT_TRANSACTIONS while
                # the last commit's markers are written, slow right after
                # a failover), and a coordinator still in the last
                # transaction's PrepareCommit or CompleteCommit answers
                # INVALID_TXN_STATE, as Kafka's does: fatal for the
                # producer (librdkafka issue #4849, seen against Kafka).
                producer.flush(60)
                producer.abort_transaction(60)
                aborted.append(t)
                return
            producer.commit_transaction(60)
            committed.append(t)

        def attempt(t):
            while True:
                try:
                    return run(t)
                except KafkaException as e:
                    err = e.args[0]
                    assert not err.fatal(), f"fatal: {err}"
                    if err.txn_requires_abort():
                        producer.abort_transaction(60)
                        aborted.append(t)
                        return
                    if not err.retriable() and err.code() != KafkaError._TIMED_OUT:
                        raise
                    time.sleep(0.5)

        for t in range(10):
            attempt(t)
        # The coordinator's node (the leader of the id's
        # __transaction_state partition) dies.
        p = coordinator_partition(txn_id, 5)
        coordinator = cluster.nodes[cluster.partition("__transaction_state", p)[0]]
        coordinator.kill()
        for t in range(10, 20):
            attempt(t)
        coordinator.start()
        cluster.wait_full_isr("txn-out", 3)
        for t in range(20, 25):
            attempt(t)

        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "txn-reader",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "log_level": 0})
        consumer.assign([TopicPartition("txn-out", p, OFFSET_BEGINNING) for p in range(3)])
        expected = {b"t-%d-%d-%d" % (t, p, i) for t in committed for p in range(3) for i in range(10)}
        seen = []
        deadline = time.time() + 60
        while len(seen) < len(expected) and time.time() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append(msg.value())
        # Nothing more after the last committed record.
        end = time.time() + 2
        while time.time() < end:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen.append(msg.value())
        consumer.close()
        assert len(seen) == len(set(seen)), "a committed record read twice"
        assert set(seen) == expected, (
            f"{len(expected - set(seen))} committed records missing, "
            f"{len(set(seen) - expected)} from aborted transactions visible")
        assert len(committed) >= 15, (committed, aborted)
    finally:
        cluster.stop()
