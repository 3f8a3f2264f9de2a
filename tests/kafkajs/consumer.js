// kafkajs consumer groups against sluice: subscribe fromBeginning,
// eachMessage, committed offsets, a second member joining (a rebalance
// that splits the partitions), the first leaving, and a restart of the
// group resuming from its commits.
'use strict'
const { assert, kafka, waitFor, main } = require('./lib')

const k = kafka('kafkajs-consumer')
const TOPIC = 'js-group'
const GROUP = 'js-group-1'

function consumer(name, seen, assignments) {
  const c = k.consumer({ groupId: GROUP, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200 })
  c.on(c.events.GROUP_JOIN, e => {
    assignments[name] = (e.payload.memberAssignment[TOPIC] || []).slice().sort()
  })
  return {
    c,
    async start() {
      await c.connect()
      await c.subscribe({ topics: [TOPIC], fromBeginning: true })
      await c.run({
        eachMessage: async ({ partition, message }) => {
          seen.push({ who: name, partition, offset: Number(message.offset), value: message.value.toString() })
        },
      })
    },
  }
}

async function produce(from, to) {
  const producer = k.producer()
  await producer.connect()
  const messages = []
  for (let i = from; i < to; i++) messages.push({ partition: i % 4, value: `m${i}` })
  await producer.send({ topic: TOPIC, acks: -1, messages })
  await producer.disconnect()
}

main({
  async group_rebalance_and_commits() {
    const admin = k.admin()
    await admin.connect()
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 4 }], waitForLeaders: true })
    await produce(0, 40)
    const seen = []
    const assignments = {}
    const a = consumer('a', seen, assignments)
    await a.start()
    await waitFor('a to read 40 records', () => seen.length >= 40)
    assert.deepEqual(assignments.a, [0, 1, 2, 3])
    assert.deepEqual(seen.map(r => r.value).sort(), Array.from({ length: 40 }, (_, i) => `m${i}`).sort())

    // B joins: the group rebalances and the partitions are split.
    const b = consumer('b', seen, assignments)
    await b.start()
    await waitFor('both members to be assigned', () =>
      assignments.b && assignments.a && assignments.a.length + assignments.b.length === 4 && assignments.b.length === 2)
    assert.deepEqual([...assignments.a, ...assignments.b].sort(), [0, 1, 2, 3])
    const described = await admin.describeGroups([GROUP])
    assert.equal(described.groups[0].state, 'Stable')
    assert.equal(described.groups[0].members.length, 2)
    assert.equal(described.groups[0].protocolType, 'consumer')

    // New records go to whoever owns their partition, each exactly once.
    await produce(40, 80)
    await waitFor('80 records', () => seen.length >= 80)
    for (const r of seen.filter(r => r.offset >= 10)) {
      assert.ok(assignments[r.who].includes(r.partition), `${r.who} read partition ${r.partition}`)
    }
    assert.equal(new Set(seen.map(r => r.value)).size, 80)

    // Commits: after both stop, every partition's commit is at its end.
    await a.c.disconnect()
    await b.c.disconnect()
    const committed = await admin.fetchOffsets({ groupId: GROUP, topics: [TOPIC] })
    assert.deepEqual(
      committed[0].partitions.map(p => [p.partition, p.offset]).sort((x, y) => x[0] - y[0]),
      [[0, '20'], [1, '20'], [2, '20'], [3, '20']]
    )

    // The group restarts where it committed: only new records arrive.
    await produce(80, 84)
    const again = []
    const c = consumer('c', again, assignments)
    await c.start()
    await waitFor('4 new records', () => again.length >= 4)
    await new Promise(r => setTimeout(r, 500))
    assert.deepEqual(again.map(r => r.value).sort(), ['m80', 'm81', 'm82', 'm83'])
    await c.c.disconnect()
    await admin.disconnect()
  },
})
