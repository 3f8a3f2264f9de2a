//! `sluice produce --topic T`: like kafka-console-producer.sh. Every line
//! of stdin becomes one record (value = the line without its `\n` or
//! `\r\n`; empty lines are sent as empty values). With `--key-separator`
//! each line is `KEY<SEP>VALUE`, and a line without the separator is an
//! error naming its line number. `--header K=V` adds headers to every
//! record, `--partition` pins the partition.
//!
//! Records are sent asynchronously, with up to [`MAX_IN_FLIGHT`]
//! deliveries outstanding; at end of input the producer flushes and every
//! delivery is checked. The first failure (unknown topic, bad line,
//! delivery error) is returned, which `main` prints as one `sluice: ...`
//! line before exiting non-zero. With `--transactional-id` the whole input
//! is one transaction: committed at the end, aborted on any failure.

use std::collections::VecDeque;
use std::io::BufRead;

use anyhow::{bail, Context};
use sluice_client::producer::DeliveryFuture;
use sluice_client::{Producer, ProducerRecord};
use tokio::sync::mpsc;

use crate::client_args::{parse_kv, produce_error, ClientArgs, ProducerArgs};

/// Most deliveries awaited at once.
const MAX_IN_FLIGHT: usize = 10_000;

/// `sluice produce`.
#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Topic to produce to (must exist).
    #[arg(long)]
    topic: String,
    /// Split each line at the first SEP into key and value.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Header KEY=VALUE added to every record; repeatable.
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = parse_kv)]
    headers: Vec<(String, String)>,
    /// Send every record to this partition (default: by key hash, or
    /// sticky for records without a key).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(0..))]
    partition: Option<i32>,
    /// Print the number of records sent to stderr at the end.
    #[arg(long)]
    verbose: bool,
    #[command(flatten)]
    producer: ProducerArgs,
}

/// Runs `sluice produce`.
pub fn run(args: &ProduceArgs) -> anyhow::Result<()> {
    if matches!(&args.key_separator, Some(s) if s.is_empty()) {
        bail!("--key-separator is empty");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(run_async(args));
    // Records still buffered after a failure are not waited for.
    rt.shutdown_background();
    result
}

/// Reads stdin on a plain thread (a blocked tokio stdin read would hold up
/// runtime shutdown) and passes `(line number, bytes)` on.
fn spawn_reader() -> mpsc::Receiver<std::io::Result<(u64, Vec<u8>)>> {
    let (tx, rx) = mpsc::channel(1024);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut number = 0;
        loop {
            let mut line = Vec::new();
            match stdin.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {
                    number += 1;
                    if line.last() == Some(&b'\n') {
                        line.pop();
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                    }
                    if tx.blocking_send(Ok((number, line))).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
            }
        }
    });
    rx
}

/// Splits `line` at the first `sep` into key and value.
fn split_key<'a>(line: &'a [u8], sep: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    let at = line.windows(sep.len()).position(|w| w == sep)?;
    Some((&line[..at], &line[at + sep.len()..]))
}

/// Turns line `number` into a record.
fn to_record(args: &ProduceArgs, number: u64, line: Vec<u8>) -> anyhow::Result<ProducerRecord> {
    let mut record = match &args.key_separator {
        None => ProducerRecord::new(args.topic.as_str(), line),
        Some(sep) => {
            let Some((key, value)) = split_key(&line, sep.as_bytes()) else {
                bail!("line {number}: no key separator {sep:?} found");
            };
            ProducerRecord::new(args.topic.as_str(), value.to_vec()).key(key.to_vec())
        }
    };
    if let Some(p) = args.partition {
        record = record.partition(p);
    }
    for (k, v) in &args.headers {
        record = record.header(k.as_bytes().to_vec(), Some(v.as_bytes().to_vec()));
    }
    Ok(record)
}

async fn await_delivery(number: u64, delivery: DeliveryFuture) -> anyhow::Result<()> {
    delivery
        .await
        .map(drop)
        .with_context(|| format!("line {number} was not delivered"))
}

async fn run_async(args: &ProduceArgs) -> anyhow::Result<()> {
    let producer = args.producer.connect(&args.client).await?;
    let sent = match send_lines(args, &producer).await {
        Ok(n) => n,
        Err(e) => {
            // Closing aborts the transaction of --transactional-id.
            let _ = producer.close().await;
            return Err(e);
        }
    };
    if let Err(e) = crate::client_args::commit(&producer).await {
        let _ = producer.close().await;
        return Err(e);
    }
    producer
        .close()
        .await
        .context("cannot close the producer")?;
    if args.verbose {
        eprintln!("{sent} records sent to {}.", args.topic);
    }
    Ok(())
}

/// Sends every line of stdin and checks every delivery; returns how many
/// records were sent.
async fn send_lines(args: &ProduceArgs, producer: &Producer) -> anyhow::Result<u64> {
    let mut lines = spawn_reader();
    let mut in_flight: VecDeque<(u64, DeliveryFuture)> = VecDeque::new();
    let mut sent = 0u64;
    while let Some(line) = lines.recv().await {
        let (number, line) = line.context("cannot read stdin")?;
        let record = match to_record(args, number, line) {
            Ok(r) => r,
            Err(e) => {
                // Lines before the bad one still go out.
                producer.flush().await;
                return Err(e);
            }
        };
        let delivery = producer.send(record).await.map_err(|e| {
            produce_error(
                &args.topic,
                e,
                format!("cannot send line {number} to {}", args.topic),
            )
        })?;
        in_flight.push_back((number, delivery));
        sent += 1;
        while in_flight.len() >= MAX_IN_FLIGHT {
            if let Some((n, d)) = in_flight.pop_front() {
                await_delivery(n, d).await?;
            }
        }
    }
    producer.flush().await;
    for (n, d) in in_flight {
        await_delivery(n, d).await?;
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_split() {
        assert_eq!(split_key(b"k:v:w", b":"), Some((&b"k"[..], &b"v:w"[..])));
        assert_eq!(split_key(b"k::v", b"::"), Some((&b"k"[..], &b"v"[..])));
        assert_eq!(split_key(b":v", b":"), Some((&b""[..], &b"v"[..])));
        assert_eq!(split_key(b"kv", b":"), None);
        assert_eq!(split_key(b"", b":"), None);
    }
}
