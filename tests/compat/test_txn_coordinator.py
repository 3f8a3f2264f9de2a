"""The transaction coordinator (txnrt: broker runtime and handlers) with
real clients: confluent-kafka's transactional producer commits and aborts
interleaved transactions over three partitions and is fenced by a second
producer with the same transactional.id; kafka-python 2.2's transactional
producer; kafka-python 3's admin client lists and describes transactions.
read_uncommitted readers see every record in order (the markers take one
offset each); read_committed readers see exactly the committed ones."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 3


def create(server, topic, partitions=PARTITIONS):
    a = AdminClient({"bootstrap.servers": server.bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def producer(server, txn_id, **extra):
    return Producer({"bootstrap.servers": server.bootstrap, "transactional.id": txn_id,
                     "transaction.timeout.ms": 60000, **extra})


def read_uncommitted(server, topic, partitions=PARTITIONS, isolation="read_uncommitted"):
    """Every record of the topic per partition that the isolation level
    shows, and each partition's end offset as that level reports it (the
    high watermark, data records plus markers; or the LSO)."""
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused",
                  "isolation.level": isolation, "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = {p: [] for p in range(partitions)}
    want = sum(ends.values())
    seen = 0
    for _ in range(200):
        for m in c.consume(100, timeout=0.2):
            assert m.error() is None, m.error()
            got[m.partition()].append(m.value().decode())
        seen = sum(len(v) for v in got.values())
        positions = c.position([TopicPartition(topic, p) for p in range(partitions)])
        if all(tp.offset >= ends[tp.partition] for tp in positions):
            break
    c.close()
    assert seen <= want
    return got, ends


def test_confluent_transactions_commit_and_abort_over_three_partitions(server):
    create(server, "txn-orders")
    p = producer(server, "orders-app")
    p.init_transactions(30)
    expected = {i: [] for i in range(PARTITIONS)}
    for n, commit in enumerate([True, False, True, False, True]):
        p.begin_transaction()
        for i in range(2 * PARTITIONS):
            value = f"t{n}-{i}"
            p.produce("txn-orders", value=value.encode(), partition=i % PARTITIONS)
            expected[i % PARTITIONS].append(value)
        if commit:
            p.commit_transaction(30)
        else:
            # Sent first: librdkafka drops what is still queued on abort.
            p.flush(10)
            p.abort_transaction(30)
    p.flush(10)
    got, ends = read_uncommitted(server, "txn-orders")
    # read_uncommitted: every record, committed or aborted, in order.
    assert got == expected
    # One marker per transaction on every partition it wrote to.
    assert ends == {i: 2 * 5 + 5 for i in range(PARTITIONS)}
    # read_committed: exactly the committed transactions' records, in order.
    got, lsos = read_uncommitted(server, "txn-orders", isolation="read_committed")
    assert got == {i: [v for v in expected[i] if v[1] in "024"] for i in range(PARTITIONS)}
    assert lsos == ends


def test_confluent_zombie_is_fenced_by_a_second_producer(server):
    create(server, "txn-zombie", 1)
    zombie = producer(server, "fenced-app")
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("txn-zombie", value=b"zombie", partition=0)
    zombie.flush(10)
    fresh = producer(server, "fenced-app")
    # Aborts the zombie's open transaction (librdkafka retries the
    # CONCURRENT_TRANSACTIONS answers while the abort completes).
    fresh.init_transactions(30)
    with pytest.raises(KafkaException) as e:
        zombie.commit_transaction(10)
    err = e.value.args[0]
    assert err.fatal(), err
    fresh.begin_transaction()
    fresh.produce("txn-zombie", value=b"fresh", partition=0)
    fresh.commit_transaction(30)
    got, ends = read_uncommitted(server, "txn-zombie", 1)
    assert got == {0: ["zombie", "fresh"]}
    assert ends == {0: 4}  # two records, the zombie's abort, the commit


def test_kafka_python_transactional_producer(server):
    from kafka import KafkaProducer
    create(server, "txn-kp", 2)
    p = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="kp-app")
    p.init_transactions()
    p.begin_transaction()
    p.send("txn-kp", value=b"kp-1", partition=0)
    p.send("txn-kp", value=b"kp-2", partition=1)
    p.commit_transaction()
    p.begin_transaction()
    p.send("txn-kp", value=b"kp-3", partition=0)
    p.flush()
    p.abort_transaction()
    p.close()
    got, ends = read_uncommitted(server, "txn-kp", 2)
    assert got == {0: ["kp-1", "kp-3"], 1: ["kp-2"]}
    assert ends == {0: 4, 1: 2}
    got, _ = read_uncommitted(server, "txn-kp", 2, isolation="read_committed")
    assert got == {0: ["kp-1"], 1: ["kp-2"]}


def test_kafka_python_3_admin_lists_and_describes_transactions(server):
    create(server, "txn-admin", 2)
    done = producer(server, "admin-done")
    done.init_transactions(30)
    done.begin_transaction()
    done.produce("txn-admin", value=b"x", partition=1)
    done.commit_transaction(30)
    open_txn = producer(server, "admin-open")
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    open_txn.produce("txn-admin", value=b"y", partition=0)
    open_txn.flush(10)

    py = os.environ.get("SLUICETEST_PYTHON_KP3")
    assert py, "SLUICETEST_PYTHON_KP3 is not set (see scripts/test.sh)"
    script = Path(__file__).with_name("txn_admin_check.py")
    run = subprocess.run([py, str(script), server.bootstrap, "admin-done", "admin-open"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    pids = {k: v["producer_id"] for k, v in got["described"].items()}
    assert got["listed"] == [["admin-done", pids["admin-done"], "CompleteCommit"],
                             ["admin-open", pids["admin-open"], "Ongoing"]]
    assert got["ongoing"] == ["admin-open"]
    assert got["older_than_an_hour"] == []
    assert got["described"] == {
        "admin-done": {"state": "CompleteCommit", "producer_id": pids["admin-done"],
                       "epoch": 0, "timeout": 60000, "partitions": [], "coordinator": 1},
        "admin-open": {"state": "Ongoing", "producer_id": pids["admin-open"],
                       "epoch": 0, "timeout": 60000, "partitions": [["txn-admin", 0]],
                       "coordinator": 1},
    }
    assert got["unknown"] == "TransactionalIdNotFoundError"
    open_txn.abort_transaction(30)
