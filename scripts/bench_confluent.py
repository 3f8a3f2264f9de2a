#!/usr/bin/env python3
"""Produce/consume throughput of `sluice server` measured with confluent-kafka
(librdkafka), the client most Kafka users run.

Usage: scripts/bench_confluent.py [--bootstrap HOST:PORT] [--messages N] [--size BYTES]
Starts nothing: point it at a running server (release build recommended):
    cargo run --release -p sluice-cli -- server --data-dir /tmp/bench-data &
    target/test-venv/bin/python scripts/bench_confluent.py
"""
import argparse
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--compression", default="none")
    a = ap.parse_args()
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    admin.create_topics([NewTopic(topic, a.partitions, 1)])[topic].result()

    payload = b"x" * a.size
    p = Producer({"bootstrap.servers": a.bootstrap, "acks": a.acks,
                  "linger.ms": 5, "batch.size": 1_000_000,
                  "compression.type": a.compression,
                  "queue.buffering.max.messages": 1_000_000})
    t0 = time.perf_counter()
    for i in range(a.messages):
        while True:
            try:
                p.produce(topic, payload, key=str(i % 1000).encode())
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    p.flush()
    t_prod = time.perf_counter() - t0

    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "bench",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    c.assign([TopicPartition(topic, i, 0) for i in range(a.partitions)])
    got = 0
    t0 = time.perf_counter()
    while got < a.messages:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                got += 1
    t_cons = time.perf_counter() - t0
    c.close()
    mb = a.messages * a.size / 1e6
    print(f"produce: {a.messages} x {a.size} B, acks={a.acks}, {a.compression}: "
          f"{a.messages / t_prod:,.0f} msg/s, {mb / t_prod:.1f} MB/s ({t_prod:.2f} s)")
    print(f"consume: {got} messages: {got / t_cons:,.0f} msg/s, {mb / t_cons:.1f} MB/s ({t_cons:.2f} s)")


if __name__ == "__main__":
    main()
