//! Word count throughput on 1 and 2 stream threads, and restore rate from a
//! changelog (docs/benchmarks.md). Starts an in-process broker on a free
//! port unless `--bootstrap-server` is given.
//!
//! ```text
//! cargo run --release -p sluice-streams --example streams_bench -- [--lines 200000] [--bootstrap-server HOST:PORT]
//! ```
//!
//! Input: `--lines` lines of 1–5 words (a 10,000-word vocabulary) over 6
//! partitions. Throughput: input lines per second from `start` until every
//! line and every word has been processed (both sub-topologies, including
//! the repartition hop). Restore: the store folders are deleted and the
//! application restarted; restored changelog records per second from
//! `start` until `RUNNING`.

use std::time::{Duration, Instant};

use sluice_client::admin::NewTopic;
use sluice_client::{Admin, ClientConfig, Producer, ProducerConfig, ProducerRecord};
use sluice_streams::config::StreamsConfig;
use sluice_streams::dsl::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use sluice_streams::runtime::{KafkaStreams, State};
use sluice_streams::serde::Serdes;
use sluice_streams::topology::Topology;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn word_count(input: &str, output: &str) -> sluice_streams::Result<Topology> {
    let b = StreamsBuilder::new();
    b.stream(
        input,
        Consumed::with(Serdes::nullable(Serdes::string()), Serdes::string()),
    )
    .flat_map_values(|v: String| {
        v.to_lowercase()
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    })
    .group_by(
        |_k, w: &String| w.clone(),
        Grouped::with(Serdes::string(), Serdes::string()),
    )
    .count(Materialized::default())
    .to_stream()
    .to(
        output,
        Produced::with(Serdes::string(), Serdes::nullable(Serdes::i64())),
    );
    b.build()
}

async fn start_broker() -> Res<(String, tokio::sync::oneshot::Sender<()>, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut c = sluice_broker::BrokerConfig::default();
    c.set("log.dirs", &dir.path().join("data").display().to_string())?;
    c.set("listeners", &format!("PLAINTEXT://127.0.0.1:{port}"))?;
    c.set("group.initial.rebalance.delay.ms", "0")?;
    let server = sluice_broker::Server::bind(c).await?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async {
        let _ = rx.await;
    }));
    Ok((format!("127.0.0.1:{port}"), tx, dir))
}

/// Writes the input; returns (lines, words).
async fn produce(client: &ClientConfig, topic: &str, lines: usize) -> Res<(u64, u64)> {
    let producer = Producer::new(ProducerConfig::new(client.clone())).await?;
    let mut words = 0u64;
    let mut acks = Vec::with_capacity(lines);
    for i in 0..lines {
        let n = i % 5 + 1;
        let line: Vec<String> = (0..n)
            .map(|j| format!("w{}", (i * 7919 + j * 104_729) % 10_000))
            .collect();
        words += n as u64;
        acks.push(
            producer
                .send(ProducerRecord::new(topic, line.join(" ")))
                .await?,
        );
    }
    for a in acks {
        a.await?;
    }
    producer.close().await?;
    Ok((lines as u64, words))
}

fn config(
    client: &ClientConfig,
    app: &str,
    state: &std::path::Path,
    threads: usize,
) -> Res<StreamsConfig> {
    let mut cfg = StreamsConfig::new(app, client.clone());
    cfg.set("num.stream.threads", &threads.to_string())?;
    cfg.set("commit.interval.ms", "1000")?;
    cfg.set("state.dir", &state.display().to_string())?;
    Ok(cfg)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Res<()> {
    let mut lines = 200_000usize;
    let mut bootstrap = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or("missing value")?;
        match flag.as_str() {
            "--lines" => lines = value.parse()?,
            "--bootstrap-server" => bootstrap = Some(value),
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    let (addr, _stop, _dir) = match bootstrap {
        Some(b) => (b, None, None),
        None => {
            let (a, s, d) = start_broker().await?;
            (a, Some(s), Some(d))
        }
    };
    let client = ClientConfig::new(&addr);
    let admin = Admin::connect(client.clone()).await?;
    let run = std::process::id();
    let input = format!("bench-input-{run}");
    let output = format!("bench-output-{run}");
    admin.create_topic(NewTopic::new(&input, 6, 1)).await?;
    admin.create_topic(NewTopic::new(&output, 6, 1)).await?;
    let t = Instant::now();
    let (n_lines, n_words) = produce(&client, &input, lines).await?;
    println!(
        "input: {n_lines} lines, {n_words} words, produced in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    for threads in [1usize, 2] {
        let state = tempfile::tempdir()?;
        let app = format!("bench-wc-{threads}t-{run}");
        let streams = KafkaStreams::from_topology(
            word_count(&input, &output)?,
            config(&client, &app, state.path(), threads)?,
        )?;
        let start = Instant::now();
        streams.start().await?;
        while streams.processed_records() < n_lines + n_words {
            if streams.state() == State::Error {
                return Err(format!("streams failed: {:?}", streams.errors()).into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "word count, {threads} thread(s): {n_lines} lines ({n_words} words) in {secs:.2}s = {:.0} lines/s, {:.0} records/s processed",
            n_lines as f64 / secs,
            (n_lines + n_words) as f64 / secs
        );
        streams.close(Duration::from_secs(60)).await;

        if threads == 1 {
            // Restore: delete the store folders, restart, time until RUNNING.
            for entry in std::fs::read_dir(state.path().join(&app))? {
                let fjall = entry?.path().join("fjall");
                if fjall.exists() {
                    std::fs::remove_dir_all(fjall)?;
                }
            }
            let again = KafkaStreams::from_topology(
                word_count(&input, &output)?,
                config(&client, &app, state.path(), 1)?,
            )?;
            let start = Instant::now();
            again.start().await?;
            if !again
                .wait_for_state(State::Running, Duration::from_secs(600))
                .await
            {
                return Err("restore did not finish".into());
            }
            let secs = start.elapsed().as_secs_f64();
            let restored = again.restored_records();
            println!(
                "restore: {restored} changelog records in {secs:.2}s = {:.0} records/s",
                restored as f64 / secs
            );
            again.close(Duration::from_secs(60)).await;
        }
    }
    Ok(())
}
