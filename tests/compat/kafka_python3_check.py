"""Run by kafka-python 3.x's interpreter (SLUICETEST_PYTHON_KP3): infers the
broker version as kafka-python does, pages through DescribeTopicPartitions,
describes the metadata quorum, then produces and consumes with the API versions that inference picks.
Prints one JSON object."""
import json
import sys

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
out = {}
admin = KafkaAdminClient(bootstrap_servers=bootstrap)
out["inferred"] = list(admin._client.check_version())
admin.create_topics([NewTopic(topic, 1, 1), NewTopic(topic + "-wide", 5, 1)])
# DescribeTopicPartitions (KIP-966), paged by a cursor.
pages = []
cursor = None
while True:
    page = admin.describe_topic_partitions([topic, topic + "-wide", "kp3-missing"],
                                           response_partition_limit=3, cursor=cursor)
    pages.append([(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
                  for t in page["topics"]])
    cursor = page["next_cursor"]
    if cursor is None:
        break
out["describe_pages"] = pages
# DescribeQuorum (Admin.describeMetadataQuorum): a single node is its
# metadata quorum's only voter and leader.
out["quorum"] = admin.describe_metadata_quorum()
admin.close()

producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False)
for i in range(10):
    producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp_ms=1000 + i).get(timeout=10)
producer.close()

consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                         auto_offset_reset="earliest", consumer_timeout_ms=10000)
tp = TopicPartition(topic, 0)
consumer.assign([tp])
out["values"] = [m.value.decode() for m in consumer][:10]
found = consumer.offsets_for_times({tp: 1005})[tp]
out["offset_for_1005"] = found.offset if found else None
out["end"] = consumer.end_offsets([tp])[tp]
consumer.close()
print(json.dumps(out, default=str))
