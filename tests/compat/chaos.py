"""A chaos run against a three-node Sluice cluster (issue #13; docs/cluster.md).

    target/test-venv/bin/python tests/compat/chaos.py [--rounds 20] [--seed N] [--dir DIR]

Starts three nodes with proxied links (cluster.py), a topic with
replication factor 3 and `min.insync.replicas=2`, and the Jepsen workload
of jepsen.py (confluent-kafka and sluice-client idempotent acks=all
producers, a confluent-kafka consumer group). Then, round after round, a
random node gets a random fault for a random 1 to 5 s: SIGKILL (then a
restart), SIGSTOP (then SIGCONT), all its links dropped or black-holed
(isolated in both directions), or its link to one other node dropped or
black-holed; between rounds the cluster must get every replica back in
sync. At the end the Jepsen checks run over the log. Exits 0 when they
hold; prints the seed, so a failing run can be replayed.

Also run by the test suite (test_chaos.py) with 20 rounds."""
import argparse
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka.admin import NewTopic  # noqa: E402

from cluster import Cluster  # noqa: E402
from jepsen import PARTITIONS, TOPIC, ConfluentProducer, GroupConsumer, SluiceProducer, check  # noqa: E402

FAULTS = ("kill", "pause", "drop", "blackhole", "link")


def run(rounds, seed, folder, say=print):
    rng = random.Random(seed)
    say(f"chaos: {rounds} rounds, seed {seed}, folder {folder}")
    cluster = Cluster(folder, proxied=True).start()
    try:
        admin = cluster.admin()
        admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        confluent = ConfluentProducer(cluster.bootstrap)
        sluice = SluiceProducer(cluster.bootstrap)
        group = GroupConsumer(cluster.bootstrap)
        for t in (confluent, sluice, group):
            t.start()
        cluster.wait_for(lambda: len(confluent.acked) > 200, "traffic")
        started = time.time()
        for r in range(rounds):
            node = cluster.nodes[rng.randint(1, 3)]
            fault = rng.choice(FAULTS)
            hold = rng.uniform(1.0, 5.0)
            other = rng.choice([i for i in cluster.nodes if i != node.id])
            mode = rng.choice(("drop", "blackhole"))
            what = f"{mode} the link of node {node.id} to node {other}" if fault == "link" \
                else f"{fault} node {node.id}"
            say(f"round {r + 1}: {what} for {hold:.1f} s (acked so far {len(confluent.acked)})")
            if fault == "kill":
                node.kill()
                time.sleep(hold)
                node.start()
            elif fault == "pause":
                node.signal(signal.SIGSTOP)
                time.sleep(hold)
                node.signal(signal.SIGCONT)
            elif fault == "link":
                cluster.cut_link(node.id, other, mode)
                time.sleep(hold)
                cluster.heal()
            else:
                cluster.isolate(node.id, fault)
                time.sleep(hold)
                cluster.heal()
            cluster.wait_full_isr(TOPIC, PARTITIONS, timeout=120)
        elapsed = time.time() - started
        acked = len(confluent.acked)
        cluster.wait_for(lambda: len(confluent.acked) > acked + 100, "acks=all after the last round")
        confluent.stop.set()
        confluent.join(180)
        code, err = sluice.finish()
        assert code == 0, f"sluice produce failed: {err}"
        total = len(confluent.acked) + sluice.sent
        cluster.wait_for(lambda: len(group.polled) >= total * 0.9, "the group catching up", 120)
        group.stop.set()
        group.join(60)
        summary = check(cluster, confluent, sluice, group)
        say(f"chaos: {rounds} rounds in {elapsed:.0f} s; {summary}")
        return summary
    finally:
        cluster.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dir", default=None, help="where the nodes' files go (default: a temporary folder)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    folder = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="sluice-chaos."))
    run(a.rounds, seed, folder)


if __name__ == "__main__":
    main()
