//! `sluice topic create|list|describe|alter|delete`: topic administration
//! through [`sluice_client::Admin`], like kafka-topics.sh (plus the topic
//! part of kafka-configs.sh for `alter --config` / `--delete-config`).
//!
//! Every subcommand connects to `--bootstrap-server` (default
//! `127.0.0.1:9092`); any failure is returned as an error, which `main`
//! prints as one `sluice: ...` line before exiting non-zero.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};
use sluice_client::admin::{NewTopic, PartitionReassignment};
use sluice_client::cluster::TopicInfo;
use sluice_client::Admin;
use sluice_client::TopicPartition;

use crate::client_args::{parse_kv, ClientArgs};

/// `sluice topic`.
#[derive(Debug, clap::Args)]
pub struct TopicArgs {
    #[command(flatten)]
    client: ClientArgs,
    #[command(subcommand)]
    command: TopicCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TopicCommand {
    /// Create a topic.
    Create {
        /// Topic name.
        topic: String,
        /// Number of partitions (broker default when omitted).
        #[arg(long)]
        partitions: Option<i32>,
        /// Replication factor (broker default when omitted).
        #[arg(long)]
        replication_factor: Option<i16>,
        /// Topic config KEY=VALUE, e.g. cleanup.policy=compact; repeatable.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_kv)]
        configs: Vec<(String, String)>,
        /// Succeed without error when the topic already exists.
        #[arg(long)]
        if_not_exists: bool,
    },
    /// List topic names, one a line.
    List,
    /// Show partitions (leader, replicas, ISR) and configs of topics
    /// (all topics when none is given).
    Describe {
        /// Topic names.
        topics: Vec<String>,
    },
    /// Add partitions to a topic or change its configs.
    Alter {
        /// Topic name.
        topic: String,
        /// New total number of partitions (can only grow).
        #[arg(long)]
        partitions: Option<i32>,
        /// Set a topic config KEY=VALUE; repeatable.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_kv)]
        configs: Vec<(String, String)>,
        /// Remove a topic config (back to the broker default); repeatable.
        #[arg(long = "delete-config", value_name = "KEY")]
        delete_configs: Vec<String>,
    },
    /// Delete topics.
    Delete {
        /// Topic names.
        #[arg(required = true)]
        topics: Vec<String>,
    },
}

/// Runs `sluice topic ...`.
pub fn run(args: &TopicArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(run_async(args))
}

async fn connect(args: &TopicArgs) -> anyhow::Result<Admin> {
    let config = args.client.client_config()?;
    args.client.connecting(Admin::connect(config)).await
}

async fn run_async(args: &TopicArgs) -> anyhow::Result<()> {
    // Validate flags before touching the network.
    if let TopicCommand::Alter {
        topic,
        partitions,
        configs,
        delete_configs,
    } = &args.command
    {
        if partitions.is_none() && configs.is_empty() && delete_configs.is_empty() {
            bail!("alter {topic}: nothing to do (give --partitions, --config or --delete-config)");
        }
        if let Some(p) = partitions {
            if *p < 1 {
                bail!("--partitions must be at least 1, got {p}");
            }
        }
    }
    if let TopicCommand::Create {
        partitions: Some(p),
        ..
    } = &args.command
    {
        if *p < 1 {
            bail!("--partitions must be at least 1, got {p}");
        }
    }
    let admin = connect(args).await?;
    match &args.command {
        TopicCommand::Create {
            topic,
            partitions,
            replication_factor,
            configs,
            if_not_exists,
        } => {
            let mut t = NewTopic::new(
                topic,
                partitions.unwrap_or(-1),
                replication_factor.unwrap_or(-1),
            );
            for (k, v) in configs {
                t = t.config(k, v);
            }
            match admin.create_topic(t).await {
                Ok(()) => println!("Created topic {topic}."),
                Err(e) if *if_not_exists && e.code() == Some(36) => {
                    println!("Topic {topic} already exists.");
                }
                Err(e) => return Err(e.into()),
            }
        }
        TopicCommand::List => {
            for t in admin.list_topics().await? {
                println!("{t}");
            }
        }
        TopicCommand::Describe { topics } => {
            let names: Vec<String> = if topics.is_empty() {
                admin.list_topics().await?
            } else {
                topics.clone()
            };
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let infos = if refs.is_empty() {
                Vec::new()
            } else {
                admin.describe_topics(&refs).await?
            };
            // Moves in progress, as kafka-topics.sh lists them (a broker
            // that cannot answer leaves them out, as Kafka's tool does).
            let moving = if infos.is_empty() {
                BTreeMap::new()
            } else {
                admin
                    .list_partition_reassignments(None)
                    .await
                    .unwrap_or_default()
            };
            for info in &infos {
                let configs = admin.describe_configs(&info.name).await?;
                let configs: Vec<String> = configs
                    .iter()
                    .filter(|c| c.is_topic_override())
                    .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("")))
                    .collect();
                print!("{}", describe_text(info, &configs.join(","), &moving));
            }
        }
        TopicCommand::Alter {
            topic,
            partitions,
            configs,
            delete_configs,
        } => {
            // Fail early (and clearly) on an unknown topic.
            let info = admin.describe_topics(&[topic.as_str()]).await?;
            if let Some(p) = partitions {
                let current = info.first().map_or(0, |t| t.partitions.len());
                if usize::try_from(*p).unwrap_or(0) != current {
                    admin.create_partitions(topic, *p).await?;
                    println!("Topic {topic} now has {p} partitions.");
                } else {
                    println!("Topic {topic} already has {p} partitions.");
                }
            }
            if !configs.is_empty() || !delete_configs.is_empty() {
                let dupes: BTreeSet<&String> = configs
                    .iter()
                    .map(|(k, _)| k)
                    .filter(|k| delete_configs.contains(k))
                    .collect();
                if let Some(k) = dupes.first() {
                    bail!("config {k} is both set with --config and removed with --delete-config");
                }
                admin.alter_configs(topic, configs, delete_configs).await?;
                println!("Updated configs of topic {topic}.");
            }
        }
        TopicCommand::Delete { topics } => {
            let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
            let mut first_err = None;
            for (t, r) in admin.delete_topics(&refs).await? {
                match r {
                    Ok(()) => println!("Deleted topic {t}."),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = first_err {
                return Err(e.into());
            }
        }
    }
    Ok(())
}

/// kafka-topics.sh --describe layout: a summary line, then one indented line
/// per partition, with the replicas being added and removed while a
/// reassignment moves it (the replication factor then counts the target
/// replicas only, as Kafka's tool does).
fn describe_text(
    info: &TopicInfo,
    configs: &str,
    moving: &BTreeMap<TopicPartition, PartitionReassignment>,
) -> String {
    // Kafka's `isReassignmentInProgress`: a move the metadata shows
    // finished (a replica it adds or removes is not listed) is left out.
    let move_of = |partition: i32| {
        let m = moving.get(&TopicPartition::new(info.name.as_str(), partition))?;
        let replicas = &info.partitions.get(&partition)?.replicas;
        m.adding_replicas
            .iter()
            .chain(&m.removing_replicas)
            .all(|r| replicas.contains(r))
            .then_some(m)
    };
    let rf = info
        .partitions
        .values()
        .map(|p| match move_of(p.partition) {
            Some(m) => m.replicas.len().saturating_sub(m.adding_replicas.len()),
            None => p.replicas.len(),
        })
        .max()
        .unwrap_or(0);
    let mut out = format!(
        "Topic: {}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}\n",
        info.name,
        topic_id_text(&info.topic_id),
        info.partitions.len(),
        rf,
        configs
    );
    for p in info.partitions.values() {
        let leader = if p.leader < 0 {
            "none".to_string()
        } else {
            p.leader.to_string()
        };
        out.push_str(&format!(
            "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}",
            info.name,
            p.partition,
            leader,
            join(&p.replicas),
            join(&p.isr)
        ));
        if let Some(m) = move_of(p.partition) {
            out.push_str(&format!(
                "\tAdding Replicas: {}\tRemoving Replicas: {}",
                join(&m.adding_replicas),
                join(&m.removing_replicas)
            ));
        }
        out.push('\n');
    }
    out
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// A topic id the way Kafka prints it: URL-safe base64 without padding.
fn topic_id_text(id: &[u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    for chunk in id.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_being_moved_lists_its_adding_and_removing_replicas() {
        use sluice_client::cluster::PartitionInfo;
        let part = |partition: i32, replicas: Vec<i32>, isr: Vec<i32>| PartitionInfo {
            partition,
            leader: replicas[0],
            leader_epoch: 0,
            replicas,
            isr,
            offline_replicas: Vec::new(),
            error_code: 0,
        };
        let info = TopicInfo {
            name: "t".into(),
            topic_id: [0; 16],
            is_internal: false,
            partitions: [
                (0, part(0, vec![1, 2, 3], vec![1, 2, 3])),
                (1, part(1, vec![4, 5, 1, 2], vec![1, 2])),
                (2, part(2, vec![4, 5, 2], vec![4, 5, 2])),
            ]
            .into_iter()
            .collect(),
        };
        let moving = [
            (
                TopicPartition::new("t", 1),
                PartitionReassignment {
                    replicas: vec![4, 5, 1, 2],
                    adding_replicas: vec![4, 5],
                    removing_replicas: vec![1],
                },
            ),
            (
                // Finished between the two calls: replica 1 is gone already.
                TopicPartition::new("t", 2),
                PartitionReassignment {
                    replicas: vec![4, 5, 1, 2],
                    adding_replicas: vec![4, 5],
                    removing_replicas: vec![1],
                },
            ),
        ]
        .into_iter()
        .collect();
        let text = describe_text(&info, "", &moving);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("\tReplicationFactor: 3\t"),
            "{}",
            lines[0]
        );
        assert_eq!(
            lines[1],
            "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3"
        );
        assert_eq!(
            lines[2],
            "\tTopic: t\tPartition: 1\tLeader: 4\tReplicas: 4,5,1,2\tIsr: 1,2\tAdding Replicas: 4,5\tRemoving Replicas: 1"
        );
        assert_eq!(
            lines[3],
            "\tTopic: t\tPartition: 2\tLeader: 4\tReplicas: 4,5,2\tIsr: 4,5,2"
        );
    }

    #[test]
    fn topic_id_matches_kafka_base64() {
        // Uuid 00000000-0000-0000-0000-000000000001 prints as AAAAAAAAAAAAAAAAAAAAAQ.
        let mut id = [0u8; 16];
        id[15] = 1;
        assert_eq!(topic_id_text(&id), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(topic_id_text(&[0xff; 16]), "_____________________w");
    }
}
