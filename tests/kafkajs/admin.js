// kafkajs admin against sluice: topics (create, list, metadata, partitions,
// configs, delete), group offsets (fetch, reset, set), groups (list,
// describe, delete) and topic offsets.
'use strict'
const { ConfigResourceTypes } = require('kafkajs')
const { assert, kafka, waitFor, main } = require('./lib')

const k = kafka('kafkajs-admin')

main({
  async topics() {
    const admin = k.admin()
    await admin.connect()
    const created = await admin.createTopics({
      topics: [
        { topic: 'js-admin-a', numPartitions: 2, configEntries: [{ name: 'retention.ms', value: '3600000' }] },
        { topic: 'js-admin-b', numPartitions: 1 },
      ],
      waitForLeaders: true,
    })
    assert.equal(created, true)
    // Creating an existing topic is not an error for kafkajs: it answers false.
    assert.equal(await admin.createTopics({ topics: [{ topic: 'js-admin-b' }] }), false)
    const names = await admin.listTopics()
    assert.ok(names.includes('js-admin-a') && names.includes('js-admin-b'), names.join(','))

    await admin.createPartitions({ topicPartitions: [{ topic: 'js-admin-a', count: 5 }] })
    const md = await admin.fetchTopicMetadata({ topics: ['js-admin-a'] })
    assert.equal(md.topics[0].name, 'js-admin-a')
    assert.deepEqual(md.topics[0].partitions.map(p => p.partitionId).sort(), [0, 1, 2, 3, 4])
    for (const p of md.topics[0].partitions) {
      assert.equal(p.partitionErrorCode, 0)
      assert.deepEqual(p.replicas, [p.leader])
      assert.deepEqual(p.isr, [p.leader])
    }

    const configs = await admin.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: 'js-admin-a', configNames: ['retention.ms', 'cleanup.policy'] }],
      includeSynonyms: false,
    })
    const entries = Object.fromEntries(configs.resources[0].configEntries.map(e => [e.configName, e.configValue]))
    assert.deepEqual(entries, { 'retention.ms': '3600000', 'cleanup.policy': 'delete' })
    await admin.alterConfigs({
      validateOnly: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: 'js-admin-b', configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }],
    })
    const b = await admin.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: 'js-admin-b', configNames: ['cleanup.policy'] }],
      includeSynonyms: false,
    })
    assert.equal(b.resources[0].configEntries[0].configValue, 'compact')

    await admin.deleteTopics({ topics: ['js-admin-b'] })
    await waitFor('js-admin-b to be gone', async () => !(await admin.listTopics()).includes('js-admin-b'))
    await admin.disconnect()
  },

  async offsets_and_groups() {
    const admin = k.admin()
    await admin.connect()
    await admin.createTopics({ topics: [{ topic: 'js-offsets', numPartitions: 2 }], waitForLeaders: true })
    const producer = k.producer()
    await producer.connect()
    const before = Date.now()
    await producer.send({
      topic: 'js-offsets',
      messages: Array.from({ length: 10 }, (_, i) => ({ partition: i % 2, value: `v${i}`, timestamp: String(before + i) })),
    })
    await producer.disconnect()
    const ends = await admin.fetchTopicOffsets('js-offsets')
    assert.deepEqual(
      ends.map(p => [p.partition, p.low, p.high, p.offset]).sort(),
      [[0, '0', '5', '5'], [1, '0', '5', '5']]
    )
    const byTime = await admin.fetchTopicOffsetsByTimestamp('js-offsets', before + 4)
    assert.deepEqual(byTime.map(p => [p.partition, p.offset]).sort(), [[0, '2'], [1, '2']])

    // A group that only commits (as an assign()-style app would), then
    // offsets set, reset and fetched.
    await admin.setOffsets({ groupId: 'js-g', topic: 'js-offsets', partitions: [{ partition: 0, offset: '3' }, { partition: 1, offset: '4' }] })
    const fetched = await admin.fetchOffsets({ groupId: 'js-g', topics: ['js-offsets'] })
    assert.deepEqual(fetched[0].partitions.map(p => [p.partition, p.offset]).sort(), [[0, '3'], [1, '4']])
    // Reset commits kafkajs' sentinels (-2 earliest, -1 latest), which
    // fetchOffsets resolves with ListOffsets when asked to.
    const sorted = f => f[0].partitions.map(p => [p.partition, p.offset]).sort()
    await admin.resetOffsets({ groupId: 'js-g', topic: 'js-offsets', earliest: true })
    assert.deepEqual(sorted(await admin.fetchOffsets({ groupId: 'js-g', topics: ['js-offsets'] })), [[0, '-2'], [1, '-2']])
    assert.deepEqual(
      sorted(await admin.fetchOffsets({ groupId: 'js-g', topics: ['js-offsets'], resolveOffsets: true })),
      [[0, '0'], [1, '0']]
    )
    await admin.resetOffsets({ groupId: 'js-g', topic: 'js-offsets' })
    assert.deepEqual(sorted(await admin.fetchOffsets({ groupId: 'js-g', topics: ['js-offsets'] })), [[0, '-1'], [1, '-1']])

    // A live consumer group is listed and described; once empty it can be
    // deleted.
    const consumer = k.consumer({ groupId: 'js-live', maxWaitTimeInMs: 200 })
    await consumer.connect()
    await consumer.subscribe({ topics: ['js-offsets'], fromBeginning: true })
    let n = 0
    await consumer.run({ eachMessage: async () => { n++ } })
    await waitFor('10 records', () => n >= 10)
    const listed = await admin.listGroups()
    const live = listed.groups.find(g => g.groupId === 'js-live')
    assert.deepEqual(live, { groupId: 'js-live', protocolType: 'consumer' })
    const described = await admin.describeGroups(['js-live'])
    const g = described.groups[0]
    assert.deepEqual([g.groupId, g.state, g.protocolType, g.members.length], ['js-live', 'Stable', 'consumer', 1])
    assert.equal(g.members[0].clientId, 'kafkajs-admin')
    await consumer.disconnect()
    const deleted = await admin.deleteGroups(['js-live'])
    assert.deepEqual(deleted.map(d => [d.groupId, d.errorCode]), [['js-live', 0]])
    const after = await admin.listGroups()
    assert.ok(!after.groups.some(x => x.groupId === 'js-live'))
    await admin.disconnect()
  },
})
