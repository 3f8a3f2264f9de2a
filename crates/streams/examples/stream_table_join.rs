//! A stream–table join: orders (key: customer id, value: amount) enriched
//! with the customer's name from a table (key: customer id, value: name),
//! written to `enriched-orders` as `<name>:<amount>`; orders of unknown
//! customers are kept with `unknown` (a left join). Runs until SIGINT or
//! SIGTERM, then closes cleanly.
//!
//! ```text
//! cargo run -p sluice-streams --example stream_table_join -- \
//!     [--bootstrap-server 127.0.0.1:9092] [--application-id streams-join] [--state-dir DIR]
//! ```
//!
//! `customers` and `orders` must exist with the same partition count
//! (they are co-partitioned; a mismatch fails at start naming both), e.g.
//! `sluice topic create customers --partitions 3` and the same for `orders`
//! and `enriched-orders`; then
//! `printf 'c1:ann\n' | sluice produce --topic customers --key-separator :`
//! and `printf 'c1:10\n' | sluice produce --topic orders --key-separator :`.

use std::time::Duration;

use sluice_client::ClientConfig;
use sluice_streams::config::StreamsConfig;
use sluice_streams::dsl::{Consumed, Materialized, Produced, StreamsBuilder};
use sluice_streams::runtime::{KafkaStreams, State};
use sluice_streams::serde::Serdes;

fn usage() -> ! {
    eprintln!("usage: stream_table_join [--bootstrap-server HOST:PORT] [--application-id ID] [--state-dir DIR]");
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut bootstrap = "127.0.0.1:9092".to_string();
    let mut application_id = "streams-join".to_string();
    let mut state_dir: Option<String> = None;
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
            _ => {
                eprintln!("unknown flag {flag}");
                usage()
            }
        }
    }
    let builder = StreamsBuilder::new();
    let customers = builder.table(
        "customers",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::as_("customers-store"),
    );
    builder
        .stream("orders", Consumed::with(Serdes::string(), Serdes::string()))
        .left_join(&customers, |amount: &String, name: Option<&String>| {
            format!("{}:{amount}", name.map_or("unknown", String::as_str))
        })
        .to(
            "enriched-orders",
            Produced::with(Serdes::string(), Serdes::string()),
        );
    let topology = builder.build()?;
    println!("{}", topology.describe());

    let mut config = StreamsConfig::new(&application_id, ClientConfig::new(&bootstrap));
    if let Some(dir) = state_dir {
        config.set("state.dir", &dir)?;
    }
    config.set("commit.interval.ms", "1000")?;
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
