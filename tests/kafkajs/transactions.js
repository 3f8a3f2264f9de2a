// kafkajs transactions against sluice (tests/compat/test_kafkajs.py):
// producer.transaction() with send, sendOffsets (AddOffsetsToTxn +
// TxnOffsetCommit, old non-flexible versions), commit and abort over three
// partitions; a read_committed consumer (kafkajs's default) sees exactly
// the committed records in order, a readUncommitted one sees all; offsets
// sent in an aborted transaction are never committed; a second producer
// with the same transactionalId fences the first.
'use strict'
const { assert, kafka, waitFor, main } = require('./lib')

const k = kafka('kafkajs-transactions')
const TOPIC = 'js-txn'
const SOURCE = 'js-txn-source'
const GROUP = 'js-txn-group'

async function readAll(readUncommitted, want) {
  const seen = { 0: [], 1: [], 2: [] }
  const c = k.consumer({ groupId: `js-txn-reader-${readUncommitted}`, readUncommitted, maxWaitTimeInMs: 200 })
  await c.connect()
  await c.subscribe({ topics: [TOPIC], fromBeginning: true })
  let n = 0
  await c.run({
    eachMessage: async ({ partition, message }) => {
      seen[partition].push(message.value.toString())
      n++
    },
  })
  await waitFor(`${want} records (readUncommitted ${readUncommitted})`, () => n >= want)
  // A little longer: nothing more may arrive.
  await new Promise(r => setTimeout(r, 500))
  await c.disconnect()
  return seen
}

async function committedOffsets(admin) {
  const got = await admin.fetchOffsets({ groupId: GROUP, topics: [SOURCE] })
  return got[0].partitions.map(p => [p.partition, p.offset]).sort((x, y) => x[0] - y[0])
}

main({
  async commit_abort_send_offsets() {
    const admin = k.admin()
    await admin.connect()
    await admin.createTopics({
      topics: [{ topic: TOPIC, numPartitions: 3 }, { topic: SOURCE, numPartitions: 3 }],
      waitForLeaders: true,
    })
    const producer = k.producer({ transactionalId: 'js-txn-app', maxInFlightRequests: 1, idempotent: true })
    await producer.connect()
    const committed = { 0: [], 1: [], 2: [] }
    const everything = { 0: [], 1: [], 2: [] }
    for (const [n, commit] of [[0, true], [1, false], [2, true], [3, false], [4, true]]) {
      const txn = await producer.transaction()
      const messages = []
      for (let i = 0; i < 6; i++) {
        const value = `t${n}-${i}`
        messages.push({ partition: i % 3, value })
        everything[i % 3].push(value)
        if (commit) committed[i % 3].push(value)
      }
      await txn.send({ topic: TOPIC, messages })
      await txn.sendOffsets({
        consumerGroupId: GROUP,
        topics: [{ topic: SOURCE, partitions: [0, 1, 2].map(p => ({ partition: p, offset: String(10 * (n + 1) + p) })) }],
      })
      if (commit) await txn.commit()
      else await txn.abort()
      // Offsets become visible with the commit marker only (written after
      // EndTxn answers, so wait for it); an abort leaves the last
      // committed ones.
      const last = commit ? n : n - 1
      const want = [0, 1, 2].map(p => [p, String(10 * (last + 1) + p)])
      let got
      await waitFor(`committed offsets ${JSON.stringify(want)}`, async () => {
        got = await committedOffsets(admin)
        return JSON.stringify(got) === JSON.stringify(want)
      }, 10000).catch(() => {})
      assert.deepEqual(got, want)
    }
    await producer.disconnect()
    assert.deepEqual(await readAll(false, 9), committed)
    assert.deepEqual(await readAll(true, 30), everything)
    await admin.disconnect()
  },

  async zombie_is_fenced() {
    const zombie = k.producer({ transactionalId: 'js-txn-zombie', maxInFlightRequests: 1, idempotent: true })
    await zombie.connect()
    const open = await zombie.transaction()
    await open.send({ topic: TOPIC, messages: [{ partition: 0, value: 'zombie' }] })
    const fresh = k.producer({ transactionalId: 'js-txn-zombie', maxInFlightRequests: 1, idempotent: true })
    await fresh.connect()
    const txn = await fresh.transaction()
    await txn.send({ topic: TOPIC, messages: [{ partition: 1, value: 'fresh' }] })
    await txn.commit()
    await assert.rejects(open.commit(), e => /fenced|epoch/i.test(`${e.type} ${e.message}`))
    await fresh.disconnect()
    await zombie.disconnect().catch(() => {})
  },
})
