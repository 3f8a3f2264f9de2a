// kafkajs fetching against sluice: a consumer reading a range from the
// beginning in order, seeking into the middle, and many small batches
// (Fetch v11 with its isolation level and session fields).
'use strict'
const { assert, kafka, waitFor, main } = require('./lib')

const k = kafka('kafkajs-fetch')

main({
  async range_from_beginning_and_seek() {
    const producer = k.producer()
    await producer.connect()
    // 200 records in 20 requests: 20 batches, auto-creating the topic.
    for (let b = 0; b < 20; b++) {
      await producer.send({
        topic: 'js-fetch',
        messages: Array.from({ length: 10 }, (_, i) => ({ key: `k${b * 10 + i}`, value: `v${b * 10 + i}` })),
      })
    }
    await producer.disconnect()

    const all = []
    const c1 = k.consumer({ groupId: 'js-fetch-all', maxWaitTimeInMs: 200, maxBytesPerPartition: 1024 })
    await c1.connect()
    await c1.subscribe({ topics: ['js-fetch'], fromBeginning: true })
    await c1.run({ eachMessage: async ({ message }) => { all.push([Number(message.offset), message.value.toString()]) } })
    await waitFor('200 records', () => all.length >= 200)
    await c1.disconnect()
    assert.deepEqual(all, Array.from({ length: 200 }, (_, i) => [i, `v${i}`]))

    // A range: seek to 120 and read through 159.
    const range = []
    const c2 = k.consumer({ groupId: 'js-fetch-range', maxWaitTimeInMs: 200 })
    await c2.connect()
    await c2.subscribe({ topics: ['js-fetch'], fromBeginning: true })
    let sought = false
    await c2.run({
      autoCommit: false,
      eachMessage: async ({ message }) => {
        const o = Number(message.offset)
        if (sought && o >= 120 && o < 160) range.push([o, message.key.toString()])
      },
    })
    c2.seek({ topic: 'js-fetch', partition: 0, offset: '120' })
    sought = true
    await waitFor('the range', () => range.length >= 40)
    await c2.disconnect()
    assert.deepEqual(range.slice(0, 40), Array.from({ length: 40 }, (_, i) => [120 + i, `k${120 + i}`]))
  },
})
