//! The `sluice` binary: the broker and the command-line tool.
//!
//! | subcommand | module | like |
//! |---|---|---|
//! | `server` | here | kafka-server-start.sh (single node, zero config) |
//! | `topic create\|list\|describe\|alter\|delete` | [`topic`] | kafka-topics.sh |
//! | `cluster describe` | [`cluster`] | kafka-cluster.sh, kafka-metadata-quorum.sh describe |
//! | `produce` | [`produce`] | kafka-console-producer.sh |
//! | `consume` | [`consume`] | kafka-console-consumer.sh |
//! | `group list\|describe\|reset-offsets\|delete` | [`group`] | kafka-consumer-groups.sh |
//! | `perf produce\|consume\|e2e` | [`perf`] | kafka-producer-perf-test.sh, kafka-consumer-perf-test.sh, EndToEndLatency |
//! | `dump-log` | [`dump_log`] | kafka-dump-log.sh |
//!
//! Client subcommands share `--bootstrap-server` / `--timeout-ms`
//! ([`client_args`]). Every failure prints one `sluice: ...` line on stderr
//! and exits non-zero (clap's usage errors exit 2). Reference: docs/cli.md.

mod client_args;
mod cluster;
mod consume;
mod dump_log;
mod group;
mod partition;
mod perf;
mod produce;
mod topic;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use sluice_broker::{BrokerConfig, Server};

/// Huge blocks are reserved without charging the kernel's overcommit
/// heuristic (sluice_broker's design 007).
#[global_allocator]
static ALLOCATOR: sluice_broker::ServerAllocator = sluice_broker::ServerAllocator;

#[derive(Debug, Parser)]
#[command(name = "sluice", version, about = "Kafka-compatible event streaming")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a broker (single node, its own controller). With no flags:
    /// PLAINTEXT://127.0.0.1:9092, data in ./sluice-data.
    Server(ServerArgs),
    /// Print the contents of `.log`, `.index` and `.timeindex` segment files,
    /// like kafka-dump-log.sh.
    DumpLog(dump_log::DumpLogArgs),
    /// Create, list, describe, alter and delete topics, like kafka-topics.sh.
    Topic(topic::TopicArgs),
    /// Describe the brokers and the metadata quorum, like kafka-cluster.sh
    /// and kafka-metadata-quorum.sh describe.
    Cluster(cluster::ClusterArgs),
    /// Reassign partitions to other brokers, cancel or list reassignments,
    /// like kafka-reassign-partitions.sh.
    Partition(partition::PartitionArgs),
    /// Send each line of stdin as a record, like kafka-console-producer.sh.
    Produce(produce::ProduceArgs),
    /// Print records of a topic, like kafka-console-consumer.sh.
    Consume(consume::ConsumeArgs),
    /// List, describe, reset offsets of and delete consumer groups, like
    /// kafka-consumer-groups.sh.
    Group(group::GroupArgs),
    /// Load generators reporting throughput and latency, like
    /// kafka-producer-perf-test.sh.
    Perf(perf::PerfArgs),
}

#[derive(Debug, clap::Args)]
struct ServerArgs {
    /// A Kafka server.properties file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listener, e.g. PLAINTEXT://127.0.0.1:9092 (`listeners`).
    #[arg(long)]
    listeners: Option<String>,
    /// Address given to clients (`advertised.listeners`).
    #[arg(long)]
    advertised_listeners: Option<String>,
    /// Data folder (`log.dirs`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// KEY=VALUE, wins over the file and the environment; repeatable.
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

fn build_config(args: &ServerArgs) -> anyhow::Result<BrokerConfig> {
    let mut config = BrokerConfig::default();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        config.apply_properties(&text, &path.display().to_string())?;
    }
    config.apply_env(std::env::vars())?;
    if let Some(l) = &args.listeners {
        config.set("listeners", l)?;
    }
    if let Some(l) = &args.advertised_listeners {
        config.set("advertised.listeners", l)?;
    }
    if let Some(d) = &args.data_dir {
        config.set("log.dirs", &d.display().to_string())?;
    }
    for o in &args.overrides {
        let (k, v) = o
            .split_once('=')
            .with_context(|| format!("--override {o:?}: expected KEY=VALUE"))?;
        config.set(k, v)?;
    }
    config.validate()?;
    Ok(config)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Server(args) => run_server(&args),
        Command::DumpLog(args) => dump_log::run(&args),
        Command::Topic(args) => topic::run(&args),
        Command::Cluster(args) => cluster::run(&args),
        Command::Partition(args) => partition::run(&args),
        Command::Produce(args) => produce::run(&args),
        Command::Consume(args) => consume::run(&args),
        Command::Group(args) => group::run(&args),
        Command::Perf(args) => perf::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run_server(args: &ServerArgs) -> anyhow::Result<()> {
    let config = build_config(args)?;
    tracing::info!("starting sluice server");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice")
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        // process.roles=controller: a quorum voter with no broker.
        if config.process_roles()?.controller_only() {
            let node = sluice_broker::ControllerNode::bind(config).await?;
            node.run(shutdown_signal()).await?;
            return anyhow::Ok(());
        }
        let server = Server::bind(config).await?;
        server.run(shutdown_signal()).await?;
        anyhow::Ok(())
    })
}
