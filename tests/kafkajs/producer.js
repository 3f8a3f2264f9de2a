// kafkajs producer against sluice: acks 1 and -1, keys, headers, explicit
// partitions, gzip, batches to several topics, and the offsets reported.
'use strict'
const { CompressionTypes } = require('kafkajs')
const { assert, kafka, main } = require('./lib')

const k = kafka('kafkajs-producer')

/** Every record of `topic` (from the beginning) via a throwaway group. */
async function readAll(topic, count) {
  const consumer = k.consumer({ groupId: `read-${topic}-${Date.now()}` })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const got = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${got.length} of ${count}`)), 30000)
    consumer
      .run({
        eachMessage: async ({ partition, message }) => {
          got.push({ partition, offset: Number(message.offset), key: message.key && message.key.toString(),
            value: message.value && message.value.toString(), headers: message.headers })
          if (got.length >= count) {
            clearTimeout(timer)
            resolve()
          }
        },
      })
      .catch(reject)
  })
  await consumer.disconnect()
  return got
}

main({
  async acks_keys_headers_partitions() {
    const admin = k.admin()
    await admin.connect()
    await admin.createTopics({ topics: [{ topic: 'js-produce', numPartitions: 3 }], waitForLeaders: true })
    await admin.disconnect()
    const producer = k.producer()
    await producer.connect()
    for (const acks of [1, -1]) {
      const res = await producer.send({
        topic: 'js-produce',
        acks,
        messages: [0, 1, 2].map(p => ({
          partition: p,
          key: `k${acks}-${p}`,
          value: `v${acks}-${p}`,
          headers: { source: 'kafkajs', acks: String(acks) },
        })),
      })
      const byPartition = Object.fromEntries(res.map(r => [r.partition, r]))
      for (const p of [0, 1, 2]) {
        assert.equal(byPartition[p].errorCode, 0)
        assert.equal(byPartition[p].baseOffset, acks === 1 ? '0' : '1', `acks ${acks} partition ${p}`)
      }
    }
    await producer.disconnect()
    const got = await readAll('js-produce', 6)
    got.sort((a, b) => a.partition - b.partition || a.offset - b.offset)
    assert.deepEqual(
      got.map(r => [r.partition, r.offset, r.key, r.value, r.headers.source.toString(), r.headers.acks.toString()]),
      [0, 1, 2].flatMap(p => [
        [p, 0, `k1-${p}`, `v1-${p}`, 'kafkajs', '1'],
        [p, 1, `k-1-${p}`, `v-1-${p}`, 'kafkajs', '-1'],
      ])
    )
  },

  async gzip_batches_and_null_values() {
    const producer = k.producer()
    await producer.connect()
    // Auto-created by the producer's metadata request (1 partition).
    const messages = Array.from({ length: 500 }, (_, i) => ({ key: `key-${i}`, value: `gzip value ${i} `.repeat(5) }))
    messages.push({ key: 'tombstone', value: null })
    const res = await producer.send({ topic: 'js-gzip', compression: CompressionTypes.GZIP, messages })
    assert.deepEqual(res.map(r => [r.partition, r.errorCode, r.baseOffset]), [[0, 0, '0']])
    // One request to two topics.
    const batch = await producer.sendBatch({
      topicMessages: [
        { topic: 'js-gzip', messages: [{ value: 'after' }] },
        { topic: 'js-batch-2', messages: [{ value: 'other topic' }] },
      ],
    })
    const offsets = Object.fromEntries(batch.map(r => [r.topicName, r.baseOffset]))
    assert.deepEqual(offsets, { 'js-gzip': '501', 'js-batch-2': '0' })
    await producer.disconnect()
    const got = await readAll('js-gzip', 502)
    got.sort((a, b) => a.offset - b.offset)
    assert.equal(got[0].value, 'gzip value 0 '.repeat(5))
    assert.equal(got[499].key, 'key-499')
    assert.deepEqual([got[500].key, got[500].value], ['tombstone', null])
    assert.deepEqual([got[501].offset, got[501].value], [501, 'after'])
  },
})
