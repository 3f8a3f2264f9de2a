"""Run by kafka-python 3's interpreter (SLUICETEST_PYTHON_KP3) for
test_idempotence.py: an idempotent producer (kafka-python's defaults)
writes 10 records to partition 0 of TOPIC, then KafkaAdminClient's
describe_producers asks for partitions 0 and 1 and for a missing topic.
Prints one JSON object."""
import json
import sys

from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
out = {}
admin = KafkaAdminClient(bootstrap_servers=bootstrap)
admin.create_topics([NewTopic(topic, 2, 1)])
p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
for i in range(10):
    p.send(topic, value=b"v%d" % i, partition=0).get(timeout=30)
pe = p._transaction_manager.producer_id_and_epoch
out["producer"] = [pe.producer_id, pe.epoch]
p.close()
states = admin.describe_producers([TopicPartition(topic, 0), TopicPartition(topic, 1)])
out["states"] = {str(tp.partition): [[s.producer_id, s.producer_epoch, s.last_sequence,
                                      s.coordinator_epoch, s.current_transaction_start_offset]
                                     for s in st.active_producers]
                 for tp, st in states.items()}
try:
    admin.describe_producers([TopicPartition(topic + "-missing", 0)])
    out["missing"] = "no error"
except Exception as e:  # kafka-python raises the partition's error
    out["missing"] = type(e).__name__
admin.close()
print(json.dumps(out))
