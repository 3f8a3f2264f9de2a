#!/usr/bin/env python3
"""Produce/consume throughput of `sluice server` measured with confluent-kafka
(librdkafka), the client most Kafka users run.

Only records whose delivery callback reported success count: the produce
figure is delivered records over the time until the last callback (flush),
and the consume phase reads back exactly the delivered records. Failed
deliveries are counted and the first few errors printed; the script exits
with status 1 when any record failed or was not read back.

Usage: scripts/bench_confluent.py [--bootstrap HOST:PORT] [--messages N] [--size BYTES]
                                  [--acks A] [--idempotence] [--batch-size BYTES]
Starts nothing: point it at a running server (release build recommended):
    cargo run --release -p sluice-cli -- server --data-dir /tmp/bench-data &
    target/test-venv/bin/python scripts/bench_confluent.py
"""
import argparse
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

SHOW_ERRORS = 5


class Deliveries:
    """Counts delivery reports: successes, failures (first few kept)."""

    def __init__(self):
        self.ok = 0
        self.failed = 0
        self.errors = []

    def __call__(self, err, _msg):
        if err is None:
            self.ok += 1
        else:
            self.failed += 1
            if len(self.errors) < SHOW_ERRORS:
                self.errors.append(str(err))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--idempotence", action="store_true",
                    help="enable.idempotence=true (needs --acks all)")
    ap.add_argument("--batch-size", type=int, default=1_000_000,
                    help="batch.size (librdkafka's default: 1000000)")
    ap.add_argument("--consume-timeout", type=float, default=60.0,
                    help="seconds without a new record before the consume phase gives up")
    a = ap.parse_args()
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    admin.create_topics([NewTopic(topic, a.partitions, 1)])[topic].result()

    payload = b"x" * a.size
    p = Producer({"bootstrap.servers": a.bootstrap, "acks": a.acks,
                  "linger.ms": 5, "batch.size": a.batch_size,
                  "compression.type": a.compression,
                  "enable.idempotence": a.idempotence,
                  "queue.buffering.max.messages": 1_000_000})
    delivered = Deliveries()
    t0 = time.perf_counter()
    for i in range(a.messages):
        while True:
            try:
                p.produce(topic, payload, key=str(i % 1000).encode(), on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(120)
    t_prod = time.perf_counter() - t0
    unreported = a.messages - delivered.ok - delivered.failed

    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "bench",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    c.assign([TopicPartition(topic, i, 0) for i in range(a.partitions)])
    got = 0
    consume_errors = 0
    t0 = time.perf_counter()
    last_progress = t0
    while got < delivered.ok and time.perf_counter() - last_progress < a.consume_timeout:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                got += 1
                last_progress = time.perf_counter()
            else:
                consume_errors += 1
    t_cons = time.perf_counter() - t0
    c.close()

    mb = delivered.ok * a.size / 1e6
    idem = ", idempotent" if a.idempotence else ""
    print(f"produce: {delivered.ok} of {a.messages} x {a.size} B delivered, acks={a.acks}{idem}, "
          f"{a.compression}: {delivered.ok / t_prod:,.0f} msg/s, {mb / t_prod:.1f} MB/s "
          f"({t_prod:.2f} s); {delivered.failed} failed, {unreported} unreported")
    for e in delivered.errors:
        print(f"  delivery failed: {e}")
    if left:
        print(f"  {left} records still queued after flush(120)")
    print(f"consume: {got} of {delivered.ok} delivered read back: {got / t_cons:,.0f} msg/s, "
          f"{got * a.size / 1e6 / t_cons:.1f} MB/s ({t_cons:.2f} s); {consume_errors} errors")
    if delivered.ok != a.messages or got != delivered.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
