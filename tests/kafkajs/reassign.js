// kafkajs partition reassignment against a three-node sluice cluster
// (SLUICE_BOOTSTRAP names all three): a replication-factor-1 partition
// with records moves to another broker (admin.alterPartitionReassignments),
// listPartitionReassignments shows it while it is in progress and nothing
// once done, Kafka's errors come back for bad assignments, and a consumer
// reads every record from the new replica.
'use strict'
const { assert, kafka, waitFor, main } = require('./lib')

const k = kafka('kafkajs-reassign')
const TOPIC = 'js-reassign'

main({
  async reassign_and_consume() {
    const admin = k.admin()
    await admin.connect()
    await admin.createTopics({
      topics: [{ topic: TOPIC, numPartitions: 1, replicationFactor: 1 }],
      waitForLeaders: true,
    })
    const producer = k.producer()
    await producer.connect()
    const values = Array.from({ length: 20 }, (_, i) => `v${i}`)
    await producer.send({ topic: TOPIC, acks: -1, messages: values.map(value => ({ key: 'k', value })) })
    await producer.disconnect()

    const md = await admin.fetchTopicMetadata({ topics: [TOPIC] })
    const from = md.topics[0].partitions[0].replicas
    assert.equal(from.length, 1)
    const to = (from[0] % 3) + 1

    await admin.alterPartitionReassignments({
      topics: [{ topic: TOPIC, partitionAssignment: [{ partition: 0, replicas: [to] }] }],
    })
    // Listed while in progress (target first, then the replica leaving),
    // absent once done.
    const listed = await admin.listPartitionReassignments({ topics: [{ topic: TOPIC, partitions: [0] }] })
    for (const t of listed.topics) {
      assert.equal(t.name, TOPIC)
      for (const p of t.partitions) {
        assert.deepEqual(p.replicas, [to, from[0]])
        assert.deepEqual(p.addingReplicas, [to])
        assert.deepEqual(p.removingReplicas, [from[0]])
      }
    }
    await waitFor('the reassignment to complete', async () => {
      const m = await admin.fetchTopicMetadata({ topics: [TOPIC] })
      const p = m.topics[0].partitions[0]
      return p.replicas.length === 1 && p.replicas[0] === to && p.leader === to
    })
    await waitFor('nothing listed', async () => {
      const l = await admin.listPartitionReassignments({})
      return !l.topics.some(t => t.name === TOPIC)
    })

    // Kafka's errors: a broker twice, an unknown broker.
    for (const replicas of [[to, to], [to, 99]]) {
      await assert.rejects(
        admin.alterPartitionReassignments({
          topics: [{ topic: TOPIC, partitionAssignment: [{ partition: 0, replicas }] }],
        }),
        e => (e.errors || [e]).some(x =>
          x.type === 'INVALID_REPLICA_ASSIGNMENT' || /replica assignment/i.test(String(x.message))),
      )
    }
    await admin.disconnect()

    const consumer = k.consumer({ groupId: 'js-reassign-group' })
    await consumer.connect()
    await consumer.subscribe({ topic: TOPIC, fromBeginning: true })
    const seen = []
    await consumer.run({ eachMessage: async ({ message }) => { seen.push(message.value.toString()) } })
    await waitFor('every record from the new replica', async () => seen.length >= values.length, 60000)
    await consumer.disconnect()
    assert.deepEqual(seen, values)
    console.log(`moved from ${from[0]} to ${to}`)
  },
})
