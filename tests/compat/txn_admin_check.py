"""Run by kafka-python 3.x's interpreter (SLUICETEST_PYTHON_KP3): lists and
describes transactions with its admin client (ListTransactions,
FindCoordinator with key type TRANSACTION, DescribeTransactions) and
prints one JSON object. Arguments: bootstrap, transactional ids to
describe."""
import json
import sys

import kafka.errors as Errors
from kafka import KafkaAdminClient

bootstrap, ids = sys.argv[1], sys.argv[2:]
admin = KafkaAdminClient(bootstrap_servers=bootstrap)
out = {}
listed = admin.list_transactions()
out["listed"] = sorted([t.transactional_id, t.producer_id, t.state.value]
                       for rows in listed.values() for t in rows)
out["ongoing"] = sorted(t.transactional_id
                        for rows in admin.list_transactions(state_filters=["Ongoing"]).values()
                        for t in rows)
out["older_than_an_hour"] = sorted(
    t.transactional_id
    for rows in admin.list_transactions(duration_filter_ms=3_600_000).values()
    for t in rows)
described = admin.describe_transactions(ids)
out["described"] = {
    k: {"state": d.state.value, "producer_id": d.producer_id, "epoch": d.producer_epoch,
        "timeout": d.transaction_timeout_ms,
        "partitions": sorted([tp.topic, tp.partition] for tp in d.topic_partitions),
        "coordinator": d.coordinator_id}
    for k, d in described.items()
}
try:
    admin.describe_transactions(["nobody"])
    out["unknown"] = None
except Errors.BrokerResponseError as e:
    out["unknown"] = type(e).__name__
admin.close()
print(json.dumps(out))
