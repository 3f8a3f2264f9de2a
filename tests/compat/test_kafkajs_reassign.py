"""kafkajs (tests/kafkajs/reassign.js) moves a partition between the
brokers of three `sluice server` processes with
admin.alterPartitionReassignments / listPartitionReassignments and reads
the records back from the new replica; then the data folders show the
log only on the new replica (the old one deleted it when the completed
reassignment was committed, the third never had one)."""
import re

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
    finally:
        cluster.stop()
