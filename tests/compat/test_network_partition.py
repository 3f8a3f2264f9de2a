"""Network faults between the nodes of a three-node cluster (issue #13).

Every link between nodes, and from clients to nodes, goes through a TCP
proxy of the test (tests/compat/netproxy.py; cluster.py `proxied=True`),
which knows which node opened each connection. The leader of a
replication factor 3, `min.insync.replicas=2` partition is isolated
(black-holed in both directions: it reaches no node, no node and no
proxied client reaches it, and nobody gets an error) while it runs on; the
test then writes to it directly with acks=all, as a client that still
reaches it would, while a confluent-kafka producer writes through the
proxies. After the links heal:

- the isolated old leader acknowledged nothing that is not in the log
  (it cannot: its followers do not fetch and it cannot shrink its ISR
  without the quorum);
- every record the confluent-kafka producer had acknowledged is in the log
  at its offset, and nothing is there twice.

Then only the link between a partition's leader and one of its followers
is dropped (both directions): the follower leaves the ISR, acks=all goes
on with the two others, and it comes back once the link heals. Last, the
quorum leader is isolated (connections reset and refused) for longer than
the session timeout, and healed: the cluster goes on with a new quorum
leader and loses nothing.
"""
import struct
import time
from io import BytesIO

from confluent_kafka.admin import NewTopic
from kafka.protocol.produce import ProduceRequest
from kafka.record.util import calc_crc32c

import wire
from cluster import SESSION_TIMEOUT_MS, Cluster
from jepsen import PARTITIONS, TOPIC, ConfluentProducer, check, read_log


def varint(n):
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def one_record_batch(value):
    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    rec = varint(len(body)) + body
    ts = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, 0, ts, ts, -1, -1, -1, 1) + rec
    head = struct.pack(">iBI", -1, 2, calc_crc32c(after_crc))
    return struct.pack(">qi", 0, len(head) + len(after_crc)) + head + after_crc


def direct_produce(node, partition, value, timeout_ms=3000):
    """An acks=all Produce v7 of one record straight to `node`'s own
    listener (not through its proxy): (error code, base offset), or None
    when no answer came."""
    req = ProduceRequest[7](transactional_id=None, required_acks=-1, timeout=timeout_ms,
                            topics=[(TOPIC, [(partition, one_record_batch(value))])])
    try:
        with wire.connect(node, timeout=timeout_ms / 1000 + 5) as s:
            s.sendall(wire.frame(wire.header(0, 7, 1) + req.encode()))
            body = BytesIO(wire.recv_frame(s))
    except OSError:
        return None

    def unpack(fmt):
        return struct.unpack(fmt, body.read(struct.calcsize(fmt)))[0]

    unpack(">i")  # correlation id
    unpack(">i")  # topics
    body.read(unpack(">h"))
    unpack(">i")  # partitions
    unpack(">i")
    return unpack(">h"), unpack(">q")


def test_an_isolated_leader_acknowledges_nothing_that_is_lost(tmp_path):
    cluster = Cluster(tmp_path, proxied=True).start()
    try:
        admin = cluster.admin()
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        producer = ConfluentProducer(cluster.bootstrap)
        producer.start()
        cluster.wait_for(lambda: len(producer.acked) > 300, "traffic")

        # The leader of a partition, not the quorum's leader, is black-holed.
        controller = cluster.metadata().controller_id
        partition, leader = next((p, cluster.partition(TOPIC, p)[0]) for p in range(PARTITIONS)
                                 if cluster.partition(TOPIC, p)[0] != controller)
        isolated = cluster.nodes[leader]
        # The proxies tell the nodes apart: the old leader's own links are
        # among those cut (followers fetch from it; it talks to the quorum).
        cluster.wait_for(lambda: any(leader in link for link in cluster.links()),
                         f"a proxied link of node {leader} to another node")
        print(f"links between nodes before the cut: {sorted(cluster.links())}")
        cluster.isolate(leader, "blackhole")
        direct = []  # (value, outcome)
        others = [n for n in cluster.nodes.values() if n.id != leader]
        deadline = time.time() + 60
        while time.time() < deadline:
            value = b"direct-%d" % len(direct)
            direct.append((value, direct_produce(isolated, partition, value)))
            views = [n.view(TOPIC) for n in others]
            if all(v[partition][0] not in (-1, leader) for v in views) and len(direct) >= 3:
                break
        assert all(v[partition][0] not in (-1, leader) for v in (n.view(TOPIC) for n in others)), \
            "no new leader while the old one is cut off"
        acked_before = len(producer.acked)
        cluster.wait_for(lambda: len(producer.acked) > acked_before + 300, "acks=all on the new leader")
        cluster.heal()
        cluster.wait_full_isr(TOPIC, PARTITIONS)

        # One link, between a partition's leader and a follower (neither
        # the quorum leader when the placement allows it), is dropped.
        controller = cluster.metadata().controller_id
        leaders = {p: cluster.partition(TOPIC, p)[0] for p in range(PARTITIONS)}
        linked = next((p for p, lead in leaders.items() if lead != controller), 0)
        lead = leaders[linked]
        follower = next(r for r in cluster.partition(TOPIC, linked)[1]
                        if r != lead and (r != controller or lead == controller))
        cluster.cut_link(lead, follower, "drop")
        cluster.wait_for(lambda: follower not in cluster.partition(TOPIC, linked)[2],
                         f"node {follower} leaving the ISR of partition {linked} (link to leader {lead} cut)")
        acked_before = len(producer.acked)
        cluster.wait_for(lambda: len(producer.acked) > acked_before + 300, "acks=all with one link cut")
        cluster.heal()
        cluster.wait_full_isr(TOPIC, PARTITIONS)

        # The quorum leader's links are dropped past the session timeout.
        quorum_leader = cluster.metadata().controller_id
        cluster.isolate(quorum_leader, "drop")
        time.sleep(SESSION_TIMEOUT_MS / 1000 + 2)
        acked_before = len(producer.acked)
        cluster.wait_for(lambda: len(producer.acked) > acked_before + 300, "acks=all without the old quorum leader")
        cluster.heal()
        cluster.wait_full_isr(TOPIC, PARTITIONS)

        producer.stop.set()
        producer.join(180)
        summary = check(cluster, producer)
        log = read_log(cluster.bootstrap)
        acknowledged = [(v, r) for v, r in direct if r is not None and r[0] == 0]
        lost_direct = [(v, r) for v, r in acknowledged if log[partition].get(r[1]) != v]
        assert not lost_direct, f"the isolated leader acknowledged writes that were lost: {lost_direct}"
        print(f"direct writes to the isolated leader: {[r for _, r in direct]}; "
              f"{summary}")
    finally:
        cluster.stop()
