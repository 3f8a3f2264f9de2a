// kafkajs idempotent producer for tests/compat/test_idempotence.py:
//   node idempotent.js TOPIC N RATE
// Sends values "0".."N-1" with keys "k<i % 30>" (acks -1, idempotent: true)
// in sends of 500 records, at most RATE records/s, printing `sent I` after
// every 1000 records; then one JSON summary line. Each send waits for the
// previous one, so kafkajs retries a send (same sequence numbers) until the
// broker takes it.
'use strict'
const { kafka } = require('./lib')

const [topic, n, rate] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])]

;(async () => {
  const producer = kafka('kafkajs-idempotent').producer({ idempotent: true })
  await producer.connect()
  const start = Date.now()
  let acked = 0
  for (let i = 0; i < n; i += 500) {
    const messages = []
    for (let j = i; j < Math.min(n, i + 500); j++) messages.push({ key: `k${j % 30}`, value: String(j) })
    await producer.send({ topic, acks: -1, messages })
    acked += messages.length
    if (acked % 1000 === 0) console.log(`sent ${acked}`)
    const ahead = (acked / rate) * 1000 - (Date.now() - start)
    if (ahead > 0) await new Promise(r => setTimeout(r, ahead))
  }
  await producer.disconnect()
  console.log(JSON.stringify({ acked, failed: 0, errors: [], idempotent: true, producer_id: null }))
})().then(
  () => process.exit(0),
  e => {
    console.error(e && e.stack ? e.stack : e)
    process.exit(1)
  }
)
