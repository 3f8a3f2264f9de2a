//! `sluice perf produce`: like kafka-producer-perf-test.sh. Sends
//! `--num-records` generated records (`--record-size` random uppercase
//! letters, or lines of a `--payload-file`) from `--producers` producer
//! instances, optionally capped at `--throughput` records/s, and reports
//! throughput and send-to-acknowledgement latency: a window line every 5 s
//! and a final summary (text, or one JSON object with `--json`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use bytes::Bytes;
use sluice_client::{Producer, ProducerRecord};

use super::{Counters, Histogram, Reporter, Summary, Throttle, Window};
use crate::client_args::{produce_error, ClientArgs, ProducerArgs};

/// `sluice perf produce`.
#[derive(Debug, clap::Args)]
pub struct PerfProduceArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Topic to produce to (must exist).
    #[arg(long)]
    topic: String,
    /// Number of records to send.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    num_records: u64,
    /// Value size in bytes (random uppercase letters); exclusive with
    /// --payload-file. Default 100 when neither is given.
    #[arg(long, value_name = "BYTES", conflicts_with = "payload_file")]
    record_size: Option<usize>,
    /// Take values from this file, split at --payload-delimiter, picking one
    /// at random per record.
    #[arg(long, value_name = "FILE")]
    payload_file: Option<PathBuf>,
    /// Separator of the values in --payload-file.
    #[arg(
        long,
        value_name = "SEP",
        default_value = "\\n",
        requires = "payload_file"
    )]
    payload_delimiter: String,
    /// Maximum records per second over all producers; -1 means no limit.
    #[arg(long, value_name = "RECORDS/S", default_value_t = -1.0, allow_negative_numbers = true)]
    throughput: f64,
    /// Producer instances (each with its own connections) sharing the
    /// records and the throughput.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    producers: u32,
    /// Print the final summary as one JSON object (and no window lines).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    producer: ProducerArgs,
}

/// What one producer instance sends and reports.
#[derive(Debug)]
struct Outcome {
    histogram: Histogram,
    errors: u64,
    first_error: Option<String>,
}

/// Runs `sluice perf produce`.
pub async fn run(args: &PerfProduceArgs) -> anyhow::Result<()> {
    if args.throughput == 0.0 || args.throughput.is_nan() {
        bail!("--throughput must be positive, or -1 for no limit");
    }
    // Shared buffers: a record clones a reference count, not the bytes
    // (as Kafka's perf test reuses its payload array).
    let payloads: Arc<Vec<Bytes>> =
        Arc::new(payloads(args)?.into_iter().map(Bytes::from).collect());
    let topic: Arc<str> = Arc::from(args.topic.as_str());
    // Connect every producer (and learn the topic) before the clock starts.
    let mut producers = Vec::with_capacity(args.producers as usize);
    for i in 0..args.producers {
        let instance = (args.producers > 1).then_some(i);
        let p = args
            .producer
            .connect_instance(&args.client, instance)
            .await?;
        p.cluster()
            .refresh_creating(std::slice::from_ref(&args.topic))
            .await
            .and_then(|(_, errors)| errors.into_iter().next().map_or(Ok(()), |(_, e)| Err(e)))
            .map_err(|e| {
                produce_error(&args.topic, e, format!("cannot produce to {}", args.topic))
            })?;
        producers.push(p);
    }
    let counters = Arc::new(Counters::default());
    let window = (!args.json).then_some(Window::produce_line as super::WindowFormat);
    let reporter = Reporter::start(counters.clone(), args.num_records, window);
    let start = Instant::now();
    let n = u64::from(args.producers);
    let rate = if args.throughput > 0.0 {
        args.throughput / n as f64
    } else {
        -1.0
    };
    let mut tasks = tokio::task::JoinSet::new();
    for (i, producer) in producers.into_iter().enumerate() {
        let i = i as u64;
        let share = args.num_records / n + u64::from(i < args.num_records % n);
        tasks.spawn(produce_share(
            producer,
            topic.clone(),
            share,
            rate,
            payloads.clone(),
            counters.clone(),
            i,
        ));
    }
    let mut histogram = Histogram::new();
    let mut errors = 0;
    let mut first_error = None;
    let mut fatal = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(o)) => {
                histogram.merge(&o.histogram);
                errors += o.errors;
                if first_error.is_none() {
                    first_error = o.first_error;
                }
            }
            Ok(Err(e)) => {
                fatal.get_or_insert(e);
                tasks.abort_all();
            }
            Err(e) if e.is_cancelled() => {}
            Err(e) => {
                fatal.get_or_insert_with(|| anyhow::anyhow!("producer task failed: {e}"));
                tasks.abort_all();
            }
        }
    }
    let elapsed = start.elapsed();
    reporter.finish().await;
    if let Some(e) = fatal {
        return Err(e);
    }
    let summary = Summary {
        records: histogram.count(),
        bytes: counters.bytes(),
        elapsed,
        latency: Some(histogram.summary()),
    };
    if args.json {
        println!("{}", summary.to_json());
    } else {
        println!("{}", summary.produce_line());
    }
    if errors > 0 {
        bail!(
            "{errors} of {} records failed; first error: {}",
            args.num_records,
            first_error.unwrap_or_default()
        );
    }
    Ok(())
}

/// The values to send: one random record of `--record-size` bytes, or the
/// pieces of `--payload-file`.
fn payloads(args: &PerfProduceArgs) -> anyhow::Result<Vec<Vec<u8>>> {
    let Some(path) = &args.payload_file else {
        let size = args.record_size.unwrap_or(100);
        let mut rng = Rng::seeded(0);
        return Ok(vec![(0..size)
            .map(|_| b'A' + (rng.next() % 26) as u8)
            .collect()]);
    };
    let text = std::fs::read(path)
        .with_context(|| format!("cannot read payload file {}", path.display()))?;
    let delimiter = args
        .payload_delimiter
        .replace("\\n", "\n")
        .replace("\\t", "\t")
        .replace("\\r", "\r");
    if delimiter.is_empty() {
        bail!("--payload-delimiter is empty");
    }
    let pieces: Vec<Vec<u8>> = split_bytes(&text, delimiter.as_bytes())
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if pieces.is_empty() {
        bail!("payload file {} holds no payloads", path.display());
    }
    Ok(pieces)
}

fn split_bytes<'a>(data: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(at) = rest.windows(sep.len()).position(|w| w == sep) {
        out.push(&rest[..at]);
        rest = &rest[at + sep.len()..];
    }
    out.push(rest);
    out
}

/// xorshift64*, seeded from the clock: payload bytes and payload-file
/// picks need no more.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn seeded(salt: u64) -> Self {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self((t ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

impl Outcome {
    /// Accounts for one finished delivery.
    fn handle(
        &mut self,
        counters: &Counters,
        latency: Duration,
        bytes: u64,
        result: sluice_client::Result<sluice_client::RecordMetadata>,
    ) {
        match result {
            Ok(_) => {
                self.histogram.record(latency);
                counters.record(bytes, Some(latency));
            }
            Err(e) => {
                counters.record_error();
                self.errors += 1;
                self.first_error.get_or_insert(e.to_string());
            }
        }
    }
}

/// One producer instance: sends `count` records; each record's callback
/// (run by the producer when its batch completes) takes the latency, as
/// Kafka's perf test does. The wall clock read at the send is also the
/// record's timestamp (Kafka's producer reads the clock for it anyway), so
/// a record costs two clock reads, not three.
async fn produce_share(
    producer: Producer,
    topic: Arc<str>,
    count: u64,
    rate: f64,
    payloads: Arc<Vec<Bytes>>,
    counters: Arc<Counters>,
    salt: u64,
) -> anyhow::Result<Outcome> {
    let shared = Arc::new((
        Mutex::new(Outcome {
            histogram: Histogram::new(),
            errors: 0,
            first_error: None,
        }),
        counters,
    ));
    let throttle = Throttle::new(rate);
    let mut rng = Rng::seeded(salt + 1);
    for i in 0..count {
        throttle.wait(i).await;
        let value = if payloads.len() == 1 {
            payloads[0].clone()
        } else {
            payloads[(rng.next() % payloads.len() as u64) as usize].clone()
        };
        let bytes = value.len() as u64;
        let sent = SystemTime::now();
        let mut record = ProducerRecord::new(topic.clone(), value);
        record.timestamp = Some(
            sent.duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        );
        let shared = shared.clone();
        producer
            .send_with_callback(record, move |r| {
                let latency = SystemTime::now().duration_since(sent).unwrap_or_default();
                let (out, counters) = &*shared;
                out.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .handle(counters, latency, bytes, r);
            })
            .await
            .with_context(|| format!("cannot produce to {topic}"))?;
    }
    producer.flush().await;
    crate::client_args::commit(&producer).await?;
    producer
        .close()
        .await
        .with_context(|| format!("cannot close the producer for {topic}"))?;
    let out = std::mem::replace(
        &mut *shared.0.lock().unwrap_or_else(PoisonError::into_inner),
        Outcome {
            histogram: Histogram::new(),
            errors: 0,
            first_error: None,
        },
    );
    Ok(out)
}
