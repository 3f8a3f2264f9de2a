//! `sluice perf e2e`: produce-to-consume latency, like Kafka's
//! `EndToEndLatency` tool. A producer task and a consumer share one
//! process and one [`Instant`] base: each record's value starts with a run
//! id and the send time (nanoseconds since the base), and the consumer,
//! assigned every partition and positioned at the log end before the first
//! send, records `receive time - send time` into a [`Histogram`].
//!
//! Unlike Kafka's tool, which sends one record and waits for it before
//! sending the next, records are pipelined at `--throughput` records/s
//! (default 1000), so the figures include batching (`--linger-ms`, default
//! 0 here) and the consumer's fetch loop under a steady load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use sluice_client::consumer::{Consumer, ConsumerConfig, OffsetReset};
use sluice_client::{Admin, Producer, ProducerRecord, TopicPartition};
use sluice_protocol::record::Compression;

use super::{Counters, Histogram, Reporter, Summary, Throttle, Window, WindowFormat};
use crate::client_args::{parse_acks, parse_compression, produce_error, ClientArgs, ProducerArgs};

/// Run id + send time.
const STAMP: usize = 16;
/// Longest single `poll`, so the idle limit and producer failures are
/// noticed promptly.
const POLL_SLICE: Duration = Duration::from_millis(100);

/// `sluice perf e2e`.
#[derive(Debug, clap::Args)]
pub struct PerfE2eArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Topic to produce to and consume from (must exist).
    #[arg(long)]
    topic: String,
    /// Number of records to send and receive.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    num_records: u64,
    /// Value size in bytes (at least 16: a run id and the send time, then
    /// random uppercase letters).
    #[arg(long, value_name = "BYTES", default_value_t = 100, value_parser = clap::value_parser!(u32).range(STAMP as i64..))]
    record_size: u32,
    /// Records per second to send; -1 means no limit (latency then includes
    /// queueing).
    #[arg(
        long,
        value_name = "RECORDS/S",
        default_value_t = 1000.0,
        allow_negative_numbers = true
    )]
    throughput: f64,
    /// Acknowledgements the leader waits for: all (= -1), 0 or 1.
    #[arg(long, value_name = "all|-1|0|1", default_value = "all", value_parser = parse_acks, allow_hyphen_values = true)]
    acks: i16,
    /// Batch compression codec.
    #[arg(long, value_name = "none|gzip|snappy|lz4|zstd", default_value = "none", value_parser = parse_compression)]
    compression: Compression,
    /// `linger.ms` of the producer (0, as in Kafka's EndToEndLatency).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    linger_ms: u64,
    /// `batch.size` of the producer.
    #[arg(long, value_name = "BYTES", default_value_t = 16_384, value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: u32,
    /// Fail when records are outstanding and none arrives (or is sent) for
    /// this long.
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_ms: u64,
    /// Print the final summary as one JSON object (and no window lines).
    #[arg(long)]
    json: bool,
}

/// What the producer task shares with the consumer loop.
#[derive(Debug, Default)]
struct SendState {
    /// Nanoseconds since the base of the latest send (0 before the first).
    last_send_ns: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl SendState {
    fn fail(&self, e: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(e);
    }

    fn error(&self, total: u64) -> Option<String> {
        let n = self.failed.load(Ordering::Relaxed);
        (n > 0).then(|| {
            let first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
            format!(
                "{n} of {total} records failed to send; first error: {}",
                first.clone().unwrap_or_default()
            )
        })
    }
}

/// Runs `sluice perf e2e`.
pub async fn run(args: &PerfE2eArgs) -> anyhow::Result<()> {
    if args.throughput == 0.0 || args.throughput.is_nan() {
        bail!("--throughput must be positive, or -1 for no limit");
    }
    let topic = args.topic.as_str();
    // The consumer: every partition, positioned at the log end.
    let mut config = ConsumerConfig::new(args.client.client_config()?);
    config.auto_offset_reset = OffsetReset::Latest;
    let mut consumer = args.client.connecting(Consumer::new(config)).await?;
    let admin = Admin::from_cluster(consumer.cluster().clone());
    let info = match admin.describe_topics(&[topic]).await {
        Ok(mut v) if !v.is_empty() => v.swap_remove(0),
        Ok(_) => bail!("topic {topic} does not exist"),
        Err(e) if e.code() == Some(3) => bail!("topic {topic} does not exist"),
        Err(e) => return Err(e).with_context(|| format!("cannot look up topic {topic}")),
    };
    let partitions: Vec<TopicPartition> = info
        .partitions
        .keys()
        .map(|p| TopicPartition::new(topic, *p))
        .collect();
    consumer.assign(&partitions)?;
    consumer.seek_to_end(&[])?;
    for tp in &partitions {
        consumer
            .position(tp)
            .await
            .with_context(|| format!("cannot find the end of {tp}"))?;
    }
    // The producer.
    let producer_args = ProducerArgs {
        acks: args.acks,
        compression: args.compression,
        linger_ms: args.linger_ms,
        batch_size: args.batch_size,
        buffer_memory: 33_554_432,
        enable_idempotence: None,
        max_in_flight: 5,
        transactional_id: None,
    };
    let producer = producer_args.connect(&args.client).await?;
    producer
        .cluster()
        .refresh_creating(std::slice::from_ref(&args.topic))
        .await
        .and_then(|(_, errors)| errors.into_iter().next().map_or(Ok(()), |(_, e)| Err(e)))
        .map_err(|e| produce_error(&args.topic, e, format!("cannot produce to {topic}")))?;

    let run_id = run_id();
    let counters = Arc::new(Counters::default());
    let window = (!args.json).then_some(Window::e2e_line as WindowFormat);
    let reporter = Reporter::start(counters.clone(), args.num_records, window);
    let state = Arc::new(SendState::default());
    let base = Instant::now();
    let sender = {
        let (topic, state) = (args.topic.clone(), state.clone());
        let (count, rate, size) = (args.num_records, args.throughput, args.record_size as usize);
        tokio::spawn(async move {
            let r = send_all(
                producer,
                topic,
                count,
                rate,
                size,
                run_id,
                base,
                state.clone(),
            )
            .await;
            if let Err(e) = &r {
                state.fail(format!("{e:#}"));
            }
            r
        })
    };
    let result = receive(&mut consumer, args, run_id, base, &counters, &state).await;
    reporter.finish().await;
    if result.is_err() {
        sender.abort();
    } else {
        match sender.await {
            Ok(r) => r?,
            Err(e) => bail!("producer task failed: {e}"),
        }
    }
    let closed = consumer.close().await;
    let (histogram, elapsed) = result?;
    closed.context("cannot close the consumer")?;
    let summary = Summary {
        records: histogram.count(),
        bytes: counters.bytes(),
        elapsed,
        latency: Some(histogram.summary()),
    };
    if args.json {
        println!("{}", summary.to_json());
    } else {
        println!("{}", summary.e2e_line());
    }
    Ok(())
}

/// A random id marking this run's records.
fn run_id() -> u64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ u64::from(std::process::id()).rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn nanos_since(base: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
}

/// Polls until `--num-records` of this run's records arrived; returns their
/// latencies and the time from the base to the last one.
async fn receive(
    consumer: &mut Consumer,
    args: &PerfE2eArgs,
    run_id: u64,
    base: Instant,
    counters: &Counters,
    state: &SendState,
) -> anyhow::Result<(Histogram, Duration)> {
    let idle = Duration::from_millis(args.idle_timeout_ms);
    let mut histogram = Histogram::new();
    let mut last_record = base;
    let mut received = 0u64;
    while received < args.num_records {
        if let Some(e) = state.error(args.num_records) {
            bail!(e);
        }
        let last_send = base + Duration::from_nanos(state.last_send_ns.load(Ordering::Relaxed));
        let since = last_record.max(last_send);
        let waited = since.elapsed();
        if waited >= idle {
            bail!(
                "no record arrived within the idle timeout of {} ms (--idle-timeout-ms); \
                 received {received} of {} records",
                args.idle_timeout_ms,
                args.num_records
            );
        }
        let records = consumer
            .poll((idle - waited).min(POLL_SLICE))
            .await
            .with_context(|| format!("cannot consume from {}", args.topic))?;
        let now = Instant::now();
        let now_ns = nanos_since(base, now);
        for r in records {
            let Some(v) = r.value.as_deref() else {
                continue;
            };
            let Some((id, sent)) = stamp(v) else {
                continue;
            };
            if id != run_id {
                continue;
            }
            let latency = Duration::from_nanos(now_ns.saturating_sub(sent));
            histogram.record(latency);
            counters.record(v.len() as u64, Some(latency));
            last_record = now;
            received += 1;
            if received == args.num_records {
                break;
            }
        }
    }
    Ok((histogram, last_record - base))
}

/// The run id and send time at the start of a value.
fn stamp(v: &[u8]) -> Option<(u64, u64)> {
    let id = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    let sent = u64::from_be_bytes(v.get(8..STAMP)?.try_into().ok()?);
    Some((id, sent))
}

/// Sends `count` stamped records at `rate` records/s and waits for their
/// deliveries (failures go to `state`).
#[allow(clippy::too_many_arguments)]
async fn send_all(
    producer: Producer,
    topic: String,
    count: u64,
    rate: f64,
    size: usize,
    run_id: u64,
    base: Instant,
    state: Arc<SendState>,
) -> anyhow::Result<()> {
    let mut template = vec![b'A'; size];
    let mut x = run_id | 1;
    for b in &mut template[STAMP..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = b'A' + (x % 26) as u8;
    }
    template[..8].copy_from_slice(&run_id.to_be_bytes());
    let throttle = Throttle::new(rate);
    let topic_name: Arc<str> = Arc::from(topic.as_str());
    for i in 0..count {
        throttle.wait(i).await;
        let mut value = template.clone();
        let sent = nanos_since(base, Instant::now());
        value[8..STAMP].copy_from_slice(&sent.to_be_bytes());
        // A delivery callback, not a task per record: failures go to
        // `state`; `flush` below waits for every outstanding record.
        let st = state.clone();
        producer
            .send_with_callback(ProducerRecord::new(topic_name.clone(), value), move |r| {
                if let Err(e) = r {
                    st.fail(e.to_string());
                }
            })
            .await
            .with_context(|| format!("cannot produce to {topic}"))?;
        state.last_send_ns.store(sent, Ordering::Relaxed);
    }
    producer.flush().await;
    producer
        .close()
        .await
        .with_context(|| format!("cannot close the producer for {topic}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip() {
        let mut v = vec![b'A'; 20];
        v[..8].copy_from_slice(&7u64.to_be_bytes());
        v[8..16].copy_from_slice(&123_456u64.to_be_bytes());
        assert_eq!(stamp(&v), Some((7, 123_456)));
        assert_eq!(stamp(&v[..15]), None);
        assert_ne!(run_id(), 0);
    }
}
