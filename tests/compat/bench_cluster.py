"""Replication benchmark for docs/benchmarks.md (issue #13); not a test.

    SLUICETEST_BIN=target/release/sluice target/test-venv/bin/python tests/compat/bench_cluster.py

On one three-node cluster (cluster.py; Kafka's `broker.session.timeout.ms`
of 9 s unless --session-ms): `sluice perf produce` of 1 KiB records with
acks=all into a replication factor 1 topic and a replication factor 3
topic (`min.insync.replicas=2`), alternating, each --rounds times; then the
failover time, --failovers times: a confluent-kafka producer sends one
acks=all record per millisecond to a one-partition replication factor 3
topic, the leader is SIGKILLed, and the time from the kill to the first
acknowledged record sent after it is taken (the node restarts and catches
up before the next one). Prints every figure and a summary."""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from cluster import Cluster  # noqa: E402
from conftest import BIN  # noqa: E402


def perf(cluster, topic, records):
    out = subprocess.run(
        [BIN, "perf", "produce", "--topic", topic, "--num-records", str(records), "--record-size", "1024",
         "--acks", "all", "--json", "--bootstrap-server", cluster.bootstrap],
        check=True, capture_output=True, text=True, timeout=600).stdout
    return json.loads(out.strip().splitlines()[-1])


def failover(cluster):
    """Seconds from the leader's SIGKILL to the first acknowledged record
    sent after it."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 0, "message.timeout.ms": 120_000, "log_level": 0})
    state = {"kill": None, "first": None}
    stop = threading.Event()

    def report(err, msg):
        sent_at = float(msg.key().decode())
        if err is None and state["kill"] is not None and sent_at > state["kill"] and state["first"] is None:
            state["first"] = time.time()

    def pump():
        while not stop.is_set():
            p.produce("failover", key=b"%.6f" % time.time(), value=b"x" * 100, on_delivery=report)
            p.poll(0.001)
        p.flush(120)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    time.sleep(2)
    leader = cluster.nodes[cluster.partition("failover", 0)[0]]
    state["kill"] = time.time()
    leader.kill()
    deadline = time.time() + 120
    while state["first"] is None and time.time() < deadline:
        time.sleep(0.01)
    stop.set()
    t.join(180)
    leader.start()
    cluster.wait_full_isr("failover", 1, timeout=120)
    return None if state["first"] is None else state["first"] - state["kill"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--failovers", type=int, default=3)
    ap.add_argument("--session-ms", type=int, default=9000)
    a = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sluice-bench-cluster."))
    cluster = Cluster(folder, extra={"broker.session.timeout.ms": str(a.session_ms),
                                     "replica.lag.time.max.ms": "30000"}).start()
    try:
        admin = cluster.admin()
        for name, rf, parts in (("rf1", 1, 3), ("rf3", 3, 3), ("failover", 3, 1)):
            admin.create_topics([NewTopic(name, parts, rf, config={"min.insync.replicas": str(min(rf, 2))})])[name].result(30)
        cluster.wait_full_isr("rf3", 3)
        cluster.wait_full_isr("failover", 1)
        results = {"rf1": [], "rf3": []}
        for r in range(a.rounds):
            for topic in ("rf1", "rf3"):
                s = perf(cluster, topic, a.records)
                results[topic].append(s)
                print(f"round {r + 1} {topic}: {json.dumps(s)}", flush=True)
        times = []
        for i in range(a.failovers):
            f = failover(cluster)
            times.append(f)
            print(f"failover {i + 1}: {f:.3f} s" if f is not None else f"failover {i + 1}: none", flush=True)
        for topic, runs in results.items():
            mb = [x.get("mb_per_sec") for x in runs]
            p99 = [x.get("latency_ms", {}).get("p99") for x in runs]
            print(f"summary {topic}: MB/s {mb}, p99 ms {p99}")
        ok = [t for t in times if t is not None]
        if ok:
            print(f"summary failover (session {a.session_ms} ms): median {statistics.median(ok):.3f} s of {[round(t, 3) for t in ok]}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
