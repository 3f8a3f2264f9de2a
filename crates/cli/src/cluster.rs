//! `sluice cluster describe`: the brokers (DescribeCluster, like
//! kafka-cluster.sh / kafka-broker-api-versions.sh list them) and the
//! metadata quorum (DescribeQuorum, like `kafka-metadata-quorum.sh
//! describe --status --replication`) through [`sluice_client::Admin`].
//!
//! Output: one line per item of tab-separated `Key: value` fields:
//! `ClusterId`, `ControllerId`; per broker `Broker`, `Host`, `Port`,
//! `Rack`; the quorum's `QuorumLeaderId`, `QuorumLeaderEpoch`,
//! `HighWatermark`, `MaxFollowerLag`; per voter `Voter`, `Endpoints`
//! (`NAME://host:port`), `LogEndOffset`, `Lag` (behind the high
//! watermark), `LastFetchTimestamp`, `LastCaughtUpTimestamp`.
//!
//! Observers (non-voting replicas) get `Observer:` lines in the voter
//! layout. An unknown timestamp prints as -1, as Kafka's tool does.

use anyhow::Context;
use sluice_client::admin::{ClusterDescription, QuorumInfo, ReplicaState};
use sluice_client::Admin;

use crate::client_args::ClientArgs;

/// `sluice cluster`.
#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    client: ClientArgs,
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ClusterCommand {
    /// List the brokers, the controller, and the metadata quorum's leader
    /// and voters.
    Describe,
}

/// Runs `sluice cluster ...`.
pub fn run(args: &ClusterArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(run_async(args))
}

async fn run_async(args: &ClusterArgs) -> anyhow::Result<()> {
    let config = args.client.client_config()?;
    let admin = args.client.connecting(Admin::connect(config)).await?;
    match args.command {
        ClusterCommand::Describe => {
            let cluster = admin.describe_cluster().await?;
            let quorum = admin.describe_quorum().await?;
            print!("{}", describe_text(&cluster, &quorum));
        }
    }
    Ok(())
}

fn describe_text(cluster: &ClusterDescription, quorum: &QuorumInfo) -> String {
    let mut out = format!(
        "ClusterId: {}\tControllerId: {}\n",
        cluster.cluster_id.as_deref().unwrap_or("none"),
        cluster.controller_id
    );
    let mut brokers = cluster.brokers.clone();
    brokers.sort_by_key(|b| b.id);
    for b in &brokers {
        out.push_str(&format!(
            "Broker: {}\tHost: {}\tPort: {}\tRack: {}\n",
            b.id,
            b.host,
            b.port,
            b.rack.as_deref().unwrap_or("none")
        ));
    }
    let lag = |r: &ReplicaState| {
        if r.log_end_offset < 0 {
            None
        } else {
            Some((quorum.high_watermark - r.log_end_offset).max(0))
        }
    };
    let max_lag = quorum
        .voters
        .iter()
        .chain(&quorum.observers)
        .filter_map(lag)
        .max()
        .unwrap_or(0);
    out.push_str(&format!(
        "QuorumLeaderId: {}\tQuorumLeaderEpoch: {}\tHighWatermark: {}\tMaxFollowerLag: {}\n",
        quorum.leader_id, quorum.leader_epoch, quorum.high_watermark, max_lag
    ));
    for (kind, list) in [("Voter", &quorum.voters), ("Observer", &quorum.observers)] {
        for r in list {
            let endpoints: Vec<String> = quorum
                .nodes
                .get(&r.replica_id)
                .map(|eps| {
                    eps.iter()
                        .map(|e| format!("{}://{}:{}", e.name, e.host, e.port))
                        .collect()
                })
                .unwrap_or_default();
            out.push_str(&format!(
                "{kind}: {}\tEndpoints: {}\tLogEndOffset: {}\tLag: {}\tLastFetchTimestamp: {}\tLastCaughtUpTimestamp: {}\n",
                r.replica_id,
                if endpoints.is_empty() {
                    "none".to_string()
                } else {
                    endpoints.join(",")
                },
                r.log_end_offset,
                lag(r).map_or_else(|| "unknown".to_string(), |l| l.to_string()),
                r.last_fetch_timestamp.unwrap_or(-1),
                r.last_caught_up_timestamp.unwrap_or(-1),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use sluice_client::admin::QuorumEndpoint;
    use sluice_client::cluster::BrokerInfo;

    use super::*;

    #[test]
    fn brokers_then_the_quorum_one_line_each() {
        let cluster = ClusterDescription {
            cluster_id: Some("abc".into()),
            controller_id: 2,
            brokers: vec![
                BrokerInfo {
                    id: 2,
                    host: "h2".into(),
                    port: 9094,
                    rack: Some("r2".into()),
                },
                BrokerInfo {
                    id: 1,
                    host: "h1".into(),
                    port: 9092,
                    rack: None,
                },
            ],
        };
        let replica = |id, end, t| ReplicaState {
            replica_id: id,
            log_end_offset: end,
            last_fetch_timestamp: t,
            last_caught_up_timestamp: t,
        };
        let mut nodes = BTreeMap::new();
        nodes.insert(
            2,
            vec![QuorumEndpoint {
                name: "CONTROLLER".into(),
                host: "h2".into(),
                port: 9095,
            }],
        );
        let quorum = QuorumInfo {
            leader_id: 2,
            leader_epoch: 5,
            high_watermark: 40,
            voters: vec![replica(1, 37, Some(100)), replica(2, 40, Some(200))],
            observers: vec![replica(3, -1, None)],
            nodes,
        };
        assert_eq!(
            describe_text(&cluster, &quorum),
            "ClusterId: abc\tControllerId: 2\n\
             Broker: 1\tHost: h1\tPort: 9092\tRack: none\n\
             Broker: 2\tHost: h2\tPort: 9094\tRack: r2\n\
             QuorumLeaderId: 2\tQuorumLeaderEpoch: 5\tHighWatermark: 40\tMaxFollowerLag: 3\n\
             Voter: 1\tEndpoints: none\tLogEndOffset: 37\tLag: 3\tLastFetchTimestamp: 100\tLastCaughtUpTimestamp: 100\n\
             Voter: 2\tEndpoints: CONTROLLER://h2:9095\tLogEndOffset: 40\tLag: 0\tLastFetchTimestamp: 200\tLastCaughtUpTimestamp: 200\n\
             Observer: 3\tEndpoints: none\tLogEndOffset: -1\tLag: unknown\tLastFetchTimestamp: -1\tLastCaughtUpTimestamp: -1\n"
        );
    }
}
