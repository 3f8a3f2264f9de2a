"""Run by kafka-python 3's interpreter (SLUICETEST_PYTHON_KP3) for
tests/compat/test_cluster_admin.py: one KafkaAdminClient call (or a few)
against a three-node cluster, named by the second argument; prints one
JSON object.

    cluster_admin_check.py BOOTSTRAP info
    cluster_admin_check.py BOOTSTRAP cluster
    cluster_admin_check.py BOOTSTRAP log-dirs BROKER [TOPIC PARTITION]
    cluster_admin_check.py BOOTSTRAP move BROKER TOPIC PARTITION PATH
    cluster_admin_check.py BOOTSTRAP elect TOPIC PARTITION
    cluster_admin_check.py BOOTSTRAP elect-again TOPIC PARTITION
    cluster_admin_check.py BOOTSTRAP consume TOPIC PARTITION
"""
import json
import sys

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.structs import TopicPartition, TopicPartitionReplica

PREFERRED = 0


def results(response):
    """ElectLeaders results as [[topic, partition, error code, message]]."""
    return [[t.topic, p.partition_id, p.error_code, p.error_message]
            for t in response.replica_election_results for p in t.partition_result]


def raised(call):
    """The exception kafka-python raises for `call`, as [class name, text]."""
    try:
        call()
    except Exception as e:  # what kafka-python raises is the result here
        return [type(e).__name__, str(e)]
    return None


bootstrap, command, args = sys.argv[1], sys.argv[2], sys.argv[3:]
admin = KafkaAdminClient(bootstrap_servers=bootstrap)
out = {}
if command == "info":
    out["inferred"] = list(admin._client.check_version())
    out["quorum"] = admin.describe_metadata_quorum()
    out["cluster"] = admin.describe_cluster()
    out["reassignments"] = {f"{tp.topic}-{tp.partition}": r
                            for tp, r in admin.list_partition_reassignments().items()}
elif command == "cluster":
    out["cluster"] = admin.describe_cluster()
elif command == "log-dirs":
    wanted = {args[1]: [int(args[2])]} if len(args) > 1 else None
    out["log_dirs"] = admin.describe_log_dirs(wanted, brokers=[int(args[0])])
elif command == "move":
    broker, topic, partition, path = int(args[0]), args[1], int(args[2]), args[3]
    moved = admin.alter_replica_log_dirs({TopicPartitionReplica(topic, partition, broker): path})
    out["errors"] = [[tpr.topic, tpr.partition, tpr.broker_id, err.__name__]
                     for tpr, err in moved.items()]
elif command == "elect":
    topic, partition = args[0], int(args[1])
    out["results"] = results(admin.elect_leaders(PREFERRED, {topic: [partition]}))
elif command == "elect-again":
    topic, partition = args[0], int(args[1])
    # The preferred replica leads: ELECTION_NOT_NEEDED, which kafka-python
    # does not raise.
    out["not_needed"] = results(admin.elect_leaders(PREFERRED, {topic: [partition]}))
    # Every partition: kafka-python lists them all (from Metadata) rather
    # than sending null topic_partitions.
    out["all"] = results(admin.elect_leaders(PREFERRED, None))
    # Unknown partitions: kafka-python raises UNKNOWN_TOPIC_OR_PARTITION,
    # or returns it with raise_errors=False.
    out["unknown_partition"] = results(admin.elect_leaders(PREFERRED, {topic: [99]},
                                                           raise_errors=False))
    out["unknown_topic"] = results(admin.elect_leaders(PREFERRED, {"no-such-topic": [0]},
                                                       raise_errors=False))
    out["unknown_raised"] = raised(lambda: admin.elect_leaders(PREFERRED, {topic: [99]}))
elif command == "consume":
    # Every record of one partition from the start, without a group.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    tp = TopicPartition(args[0], int(args[1]))
    consumer.assign([tp])
    out["values"] = [m.value.decode() for m in consumer]
    consumer.close()
else:
    raise SystemExit(f"unknown command {command}")
admin.close()
print(json.dumps(out, default=str))
