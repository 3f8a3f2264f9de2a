// Shared by the kafkajs checks: a client for the broker in SLUICE_BOOTSTRAP,
// a bounded wait, and a runner that prints the failure and exits non-zero.
'use strict'
const assert = require('node:assert/strict')
const { Kafka, logLevel } = require('kafkajs')

function kafka(clientId) {
  const brokers = (process.env.SLUICE_BOOTSTRAP || '').split(',').filter(Boolean)
  assert.ok(brokers.length > 0, 'SLUICE_BOOTSTRAP is not set')
  return new Kafka({
    clientId,
    brokers,
    logLevel: process.env.KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.ERROR,
    retry: { retries: 5, initialRetryTime: 100 },
  })
}

/** Waits until `cond()` is true, polling every 50 ms, at most `ms`. */
async function waitFor(what, cond, ms = 30000) {
  const end = Date.now() + ms
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise(r => setTimeout(r, 50))
  }
}

/** Runs the named checks in order; each is an async function. */
function main(checks) {
  const only = process.argv.slice(2)
  ;(async () => {
    for (const [name, check] of Object.entries(checks)) {
      if (only.length && !only.includes(name)) continue
      const started = Date.now()
      await check()
      console.log(`ok ${name} (${Date.now() - started} ms)`)
    }
  })().then(
    () => process.exit(0),
    e => {
      console.error(e && e.stack ? e.stack : e)
      process.exit(1)
    }
  )
}

module.exports = { assert, kafka, waitFor, main }
