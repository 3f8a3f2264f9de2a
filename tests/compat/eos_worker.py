"""Consume-transform-produce with confluent-kafka's transactional producer,
for tests/compat/test_transactions.py, which SIGKILLs it at random points:

    python eos_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

Each transaction takes what one poll returned, writes `out-<value>` to the
output partition of the same number, and commits the consumed positions
with send_offsets_to_transaction (static membership, so a restarted worker
takes its place in the group at once). Prints `ready` once it has fenced
its previous incarnation and subscribed."""
import sys
import time

from confluent_kafka import Consumer, Producer

bootstrap, source, sink, group, txn_id = sys.argv[1:6]
consumer = Consumer({
    "bootstrap.servers": bootstrap, "group.id": group,
    "group.instance.id": f"{group}-worker", "session.timeout.ms": 6000,
    "enable.auto.commit": False, "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
})
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                     "transaction.timeout.ms": 30000, "linger.ms": 5})
# Fences the previous incarnation and aborts its open transaction (and so
# its pending offsets) before this one reads the committed offsets.
producer.init_transactions(60)
consumer.subscribe([source])
print("ready", flush=True)
while True:
    records = consumer.consume(40, timeout=0.5)
    if not records:
        continue
    producer.begin_transaction()
    for r in records:
        if r.error() is not None:
            raise SystemExit(f"consume error: {r.error()}")
        producer.produce(sink, key=r.key(), value=b"out-" + r.value(), partition=r.partition())
    # The output reaches the broker before the "work" of the transaction is
    # over, so a kill in this window leaves records that must be aborted.
    producer.flush(60)
    time.sleep(0.1)
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 60)
    producer.commit_transaction(60)
