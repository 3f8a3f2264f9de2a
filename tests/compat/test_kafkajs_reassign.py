"""kafkajs (tests/kafkajs/reassign.js) moves a partition between the
brokers of three `sluice server` processes with
admin.alterPartitionReassignments / listPartitionReassignments and reads
the records back from the new replica; then the data folders show the
log only on the new replica (the old one deleted it when the completed
reassignment was committed, the third never had one). Then the `sluice
partition` CLI moves it on to the third broker, lists nothing once done,
and refuses a cancellation of nothing with Kafka's error."""
import cli
from cluster import Cluster
from test_kafkajs import run_node


class _Bootstrap:
    def __init__(self, cluster):
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap

    def log(self):
        return "\n".join(f"--- node {i}\n{n.log()}" for i, n in self.cluster.nodes.items())


def test_kafkajs_reassigns_a_partition(tmp_path):
    cluster = Cluster(tmp_path).start()
    try:
        ok = run_node(_Bootstrap(cluster), "reassign.js")
        assert [l.split()[1] for l in ok] == ["reassign_and_consume"]
        out = ok[0]
        leader, replicas, _ = cluster.partition("js-reassign", 0)
        assert replicas == [leader]
        for i, n in cluster.nodes.items():
            folder = n.folder / f"data-{i}" / "js-reassign-0"
            assert folder.is_dir() == (i == leader), (i, leader, out)

        # The CLI moves it on to the next broker.
        target = leader % 3 + 1
        boot = ["--bootstrap-server", cluster.bootstrap]
        p = cli.run(["partition", "reassign", "--topic", "js-reassign", "--partition", "0",
                     "--replicas", str(target), *boot])
        assert p.stdout.decode() == f"Topic: js-reassign\tPartition: 0\tReplicas: {target}\n"
        cluster.wait_for(lambda: cluster.partition("js-reassign", 0)[:2] == (target, [target]),
                         "the CLI's reassignment to complete")
        cluster.wait_for(lambda: cli.run(["partition", "reassignments", *boot]).stdout == b"",
                         "nothing listed once done")
        p = cli.run(["partition", "cancel", "--topic", "js-reassign", "--partition", "0", *boot],
                    check=False)
        assert p.returncode != 0
        assert b"NoReassignmentInProgress (Kafka error code 85)" in p.stderr, p.stderr
    finally:
        cluster.stop()
