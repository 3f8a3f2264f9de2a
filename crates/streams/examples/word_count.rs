//! Word count, as Kafka's `WordCountDemo`: reads lines from
//! `streams-plaintext-input`, splits them into lower-cased words, counts
//! each word, and writes every new count to `streams-wordcount-output`
//! with string keys and counts encoded as Kafka's `LongSerializer` does
//! (8 bytes, big-endian). Runs until SIGINT or SIGTERM, then closes
//! cleanly (commit, checkpoints, leave the group).
//!
//! ```text
//! cargo run -p sluice-streams --example word_count -- \
//!     [--bootstrap-server 127.0.0.1:9092] [--application-id streams-wordcount] \
//!     [--state-dir /tmp/kafka-streams] [--threads 1] [--config KEY=VALUE]...
//! ```
//!
//! `--config` sets any `StreamsConfig` key by Kafka's name (repeatable),
//! e.g. `--config session.timeout.ms=6000`.
//!
//! Both topics must exist (the demo does not create them), e.g.
//! `sluice topic create streams-plaintext-input --partitions 6`.

use std::time::Duration;

use sluice_client::ClientConfig;
use sluice_streams::config::StreamsConfig;
use sluice_streams::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use sluice_streams::runtime::{KafkaStreams, State};
use sluice_streams::serde::Serdes;
use sluice_streams::topology::Topology;

/// The word-count topology.
fn word_count() -> sluice_streams::Result<Topology> {
    let builder = StreamsBuilder::new();
    builder
        .stream(
            "streams-plaintext-input",
            Consumed::with(Serdes::nullable(Serdes::string()), Serdes::string()),
        )
        .flat_map_values(|line: String| {
            line.to_lowercase()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .group_by(
            |_key, word: &String| word.clone(),
            Grouped::with(Serdes::string(), Serdes::string()),
        )
        .count(Materialized::default())
        .to_stream()
        .to(
            "streams-wordcount-output",
            Produced::with(Serdes::string(), Serdes::nullable(Serdes::i64())),
        );
    builder.build()
}

fn usage() -> ! {
    eprintln!(
        "usage: word_count [--bootstrap-server HOST:PORT] [--application-id ID] \
         [--state-dir DIR] [--threads N] [--config KEY=VALUE]..."
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut bootstrap = "127.0.0.1:9092".to_string();
    let mut application_id = "streams-wordcount".to_string();
    let mut state_dir: Option<String> = None;
    let mut threads = "1".to_string();
    let mut overrides = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            eprintln!("{flag} needs a value");
            usage()
        };
        match flag.as_str() {
            "--bootstrap-server" => bootstrap = value,
            "--application-id" => application_id = value,
            "--state-dir" => state_dir = Some(value),
            "--threads" => threads = value,
            "--config" => match value.split_once('=') {
                Some((k, v)) => overrides.push((k.to_string(), v.to_string())),
                None => {
                    eprintln!("--config {value}: expected KEY=VALUE");
                    usage()
                }
            },
            _ => {
                eprintln!("unknown flag {flag}");
                usage()
            }
        }
    }
    let mut config = StreamsConfig::new(&application_id, ClientConfig::new(&bootstrap));
    if let Some(dir) = state_dir {
        config.set("state.dir", &dir)?;
    }
    config.set("num.stream.threads", &threads)?;
    config.set("commit.interval.ms", "1000")?;
    for (key, value) in &overrides {
        config.set(key, value)?;
    }
    let topology = word_count()?;
    println!("{}", topology.describe());
    let streams = KafkaStreams::from_topology(topology, config)?;
    streams.set_state_listener(|new, old| eprintln!("state {old:?} -> {new:?}"))?;
    streams.start().await?;

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut watch = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = watch.tick() => {
                if streams.state() == State::Error {
                    eprintln!("stopped on error: {:?}", streams.errors());
                    std::process::exit(1);
                }
            }
        }
    }
    let clean = streams.close(Duration::from_secs(30)).await;
    eprintln!("closed (clean: {clean})");
    Ok(())
}
