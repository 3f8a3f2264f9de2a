//! `sluice partition reassign|cancel|reassignments`: partition
//! reassignments through [`sluice_client::Admin`], like
//! kafka-reassign-partitions.sh `--execute`, `--cancel` and `--list`
//! (AlterPartitionReassignments, ListPartitionReassignments).
//!
//! `reassign` prints one `Topic: ...\tPartition: ...\tReplicas: ...` line
//! per partition moved and fails if the broker refused it; the move goes on
//! in the background (new replicas catch up, then the old ones leave).
//! `reassignments` prints one line per move in progress:
//! `Topic`, `Partition`, `Replicas` (target first, then those leaving),
//! `Adding`, `Removing`; nothing when no move is in progress.

use anyhow::{bail, Context};
use sluice_client::admin::PartitionReassignment;
use sluice_client::{Admin, TopicPartition};

use crate::client_args::ClientArgs;

/// `sluice partition`.
#[derive(Debug, clap::Args)]
pub struct PartitionArgs {
    #[command(flatten)]
    client: ClientArgs,
    #[command(subcommand)]
    command: PartitionCommand,
}

#[derive(Debug, clap::Subcommand)]
enum PartitionCommand {
    /// Move a partition to new replicas (the first is the preferred leader).
    Reassign {
        /// Topic name.
        #[arg(long)]
        topic: String,
        /// Partition index; repeatable.
        #[arg(long = "partition", required = true)]
        partitions: Vec<i32>,
        /// Broker ids, comma-separated, e.g. 2,3,1.
        #[arg(long, value_delimiter = ',', required = true)]
        replicas: Vec<i32>,
    },
    /// Cancel the reassignment of partitions (back to their replicas
    /// before it).
    Cancel {
        /// Topic name.
        #[arg(long)]
        topic: String,
        /// Partition index; repeatable.
        #[arg(long = "partition", required = true)]
        partitions: Vec<i32>,
    },
    /// List the reassignments in progress (of one topic with --topic).
    Reassignments {
        /// Only this topic's partitions.
        #[arg(long)]
        topic: Option<String>,
    },
}

/// Runs `sluice partition ...`.
pub fn run(args: &PartitionArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(run_async(args))
}

async fn run_async(args: &PartitionArgs) -> anyhow::Result<()> {
    let config = args.client.client_config()?;
    let admin = args.client.connecting(Admin::connect(config)).await?;
    match &args.command {
        PartitionCommand::Reassign {
            topic,
            partitions,
            replicas,
        } => {
            let moves: Vec<_> = partitions
                .iter()
                .map(|&p| {
                    (
                        TopicPartition::new(topic.as_str(), p),
                        Some(replicas.clone()),
                    )
                })
                .collect();
            let done = admin.alter_partition_reassignments(&moves).await?;
            report(&done, |tp| {
                format!(
                    "Topic: {}\tPartition: {}\tReplicas: {}",
                    tp.topic,
                    tp.partition,
                    join(replicas)
                )
            })?;
        }
        PartitionCommand::Cancel { topic, partitions } => {
            let moves: Vec<_> = partitions
                .iter()
                .map(|&p| (TopicPartition::new(topic.as_str(), p), None))
                .collect();
            let done = admin.alter_partition_reassignments(&moves).await?;
            report(&done, |tp| {
                format!(
                    "Topic: {}\tPartition: {}\tCancelled",
                    tp.topic, tp.partition
                )
            })?;
        }
        PartitionCommand::Reassignments { topic } => {
            let listed = admin.list_partition_reassignments(None).await?;
            for (tp, r) in listed
                .iter()
                .filter(|(tp, _)| topic.as_ref().is_none_or(|t| *t == tp.topic))
            {
                println!("{}", list_line(tp, r));
            }
        }
    }
    Ok(())
}

/// Prints `line` for each partition done; fails naming those refused.
fn report(
    done: &[(TopicPartition, sluice_client::Result<()>)],
    line: impl Fn(&TopicPartition) -> String,
) -> anyhow::Result<()> {
    let mut failed = Vec::new();
    for (tp, r) in done {
        match r {
            Ok(()) => println!("{}", line(tp)),
            Err(e) => failed.push(e.to_string()),
        }
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn list_line(tp: &TopicPartition, r: &PartitionReassignment) -> String {
    format!(
        "Topic: {}\tPartition: {}\tReplicas: {}\tAdding: {}\tRemoving: {}",
        tp.topic,
        tp.partition,
        join(&r.replicas),
        join(&r.adding_replicas),
        join(&r.removing_replicas)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reassignment_in_progress_is_one_line() {
        let r = PartitionReassignment {
            replicas: vec![2, 3, 1],
            adding_replicas: vec![2, 3],
            removing_replicas: vec![1],
        };
        assert_eq!(
            list_line(&TopicPartition::new("t", 0), &r),
            "Topic: t\tPartition: 0\tReplicas: 2,3,1\tAdding: 2,3\tRemoving: 1"
        );
    }
}
