//! `sluice group list|describe|reset-offsets|delete`: consumer group
//! administration through [`sluice_client::Admin`], like
//! kafka-consumer-groups.sh.
//!
//! - `list` prints group ids one a line (`--state`: a GROUP STATE table);
//! - `describe G...` prints, per group, GROUP TOPIC PARTITION
//!   CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID (committed
//!   offsets, log end offsets, and the members' assignments; `-` where a
//!   partition has no commit or no owner); `--members` and `--state` show
//!   the members or the group summary instead;
//! - `reset-offsets --group G (--topic T[:P,...]... | --all-topics)` with one
//!   of `--to-earliest`, `--to-latest`, `--to-offset N`, `--to-datetime`,
//!   `--shift-by N` prints the new offsets (GROUP TOPIC PARTITION
//!   NEW-OFFSET) and commits them only with `--execute` (dry run otherwise),
//!   and only while the group has no members;
//! - `delete G...` deletes groups.
//!
//! Failures are returned as errors, which `main` prints as one
//! `sluice: ...` line before exiting non-zero.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};
use clap::ArgGroup;
use sluice_client::admin::{GroupDescription, OffsetAndMetadata, OffsetSpec};
use sluice_client::{Admin, ClientError, TopicPartition};

use crate::client_args::ClientArgs;

/// Kafka error codes handled specially.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;

/// `sluice group`.
#[derive(Debug, clap::Args)]
pub struct GroupArgs {
    #[command(flatten)]
    client: ClientArgs,
    #[command(subcommand)]
    command: GroupCommand,
}

#[derive(Debug, clap::Subcommand)]
enum GroupCommand {
    /// List group ids, one a line.
    List {
        /// Also show each group's state.
        #[arg(long)]
        state: bool,
    },
    /// Show committed offsets, log end offsets, lag and owners of groups'
    /// partitions.
    Describe {
        /// Group ids.
        #[arg(required = true)]
        groups: Vec<String>,
        /// Show the members instead (CONSUMER-ID HOST CLIENT-ID
        /// #PARTITIONS).
        #[arg(long, conflicts_with = "state")]
        members: bool,
        /// Show the group summary instead (coordinator, assignor, state,
        /// member count).
        #[arg(long)]
        state: bool,
    },
    /// Set a group's committed offsets (dry run unless --execute).
    ResetOffsets(ResetArgs),
    /// Delete groups (they must have no members).
    Delete {
        /// Group ids.
        #[arg(required = true)]
        groups: Vec<String>,
    },
}

/// `sluice group reset-offsets`.
#[derive(Debug, clap::Args)]
#[command(group(ArgGroup::new("scope").required(true).args(["topics", "all_topics"])))]
#[command(group(ArgGroup::new("scenario").required(true).args(
    ["to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by"]
)))]
struct ResetArgs {
    /// Group id.
    #[arg(long)]
    group: String,
    /// A topic (all its partitions) or TOPIC:P,P,... ; repeatable.
    #[arg(long = "topic", value_name = "TOPIC[:P,P...]", value_parser = parse_topic_spec)]
    topics: Vec<TopicSpec>,
    /// Every topic the group has committed offsets for.
    #[arg(long)]
    all_topics: bool,
    /// Reset to the log start offset.
    #[arg(long)]
    to_earliest: bool,
    /// Reset to the log end offset.
    #[arg(long)]
    to_latest: bool,
    /// Reset to this offset (clamped to the partition's offset range).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    to_offset: Option<i64>,
    /// Reset to the first offset at or after this UTC time,
    /// YYYY-MM-DDTHH:MM:SS[.mmm][Z|+HH:MM].
    #[arg(long, value_name = "DATETIME", value_parser = parse_datetime)]
    to_datetime: Option<i64>,
    /// Move the committed offset by N (may be negative; clamped to the
    /// partition's offset range).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    shift_by: Option<i64>,
    /// Only print the new offsets (the default).
    #[arg(long, conflicts_with = "execute")]
    dry_run: bool,
    /// Commit the new offsets.
    #[arg(long)]
    execute: bool,
}

/// `--topic T` or `--topic T:0,2`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TopicSpec {
    topic: String,
    /// Empty: every partition.
    partitions: Vec<i32>,
}

fn parse_topic_spec(s: &str) -> Result<TopicSpec, String> {
    let (topic, parts) = match s.split_once(':') {
        Some((t, p)) => (t.trim(), Some(p)),
        None => (s.trim(), None),
    };
    if topic.is_empty() {
        return Err(format!("expected TOPIC or TOPIC:P,P..., got {s:?}"));
    }
    let mut partitions = Vec::new();
    if let Some(p) = parts {
        for n in p.split(',') {
            match n.trim().parse::<i32>() {
                Ok(v) if v >= 0 => partitions.push(v),
                _ => return Err(format!("bad partition {n:?} in {s:?}")),
            }
        }
    }
    Ok(TopicSpec {
        topic: topic.to_string(),
        partitions,
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DDTHH:MM:SS[.fff][Z|+HH:MM|-HH:MM]` (UTC unless an offset is
/// given) as milliseconds since the epoch.
fn parse_datetime(s: &str) -> Result<i64, String> {
    let bad = || format!("expected YYYY-MM-DDTHH:MM:SS[.mmm][Z], got {s:?}");
    let b = s.trim().as_bytes();
    let num = |from: usize, len: usize| -> Result<i64, String> {
        let part = b.get(from..from + len).ok_or_else(bad)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        Ok(part.iter().fold(0, |a, d| a * 10 + i64::from(d - b'0')))
    };
    let sep = |at: usize, c: u8| -> Result<(), String> {
        (b.get(at) == Some(&c)).then_some(()).ok_or_else(bad)
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    sep(4, b'-')?;
    sep(7, b'-')?;
    if !matches!(b.get(10), Some(b'T' | b't' | b' ')) {
        return Err(bad());
    }
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    sep(13, b':')?;
    sep(16, b':')?;
    let mut i = 19;
    let mut millis = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return Err(bad());
        }
        let digits = &b[start..i.min(start + 3)];
        millis = digits.iter().fold(0, |a, d| a * 10 + i64::from(d - b'0'));
        for _ in digits.len()..3 {
            millis *= 10;
        }
    }
    let offset_min = match b.get(i) {
        None => 0,
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&c @ (b'+' | b'-')) => {
            let h = num(i + 1, 2)?;
            let m = match b.get(i + 3) {
                Some(b':') if b.len() == i + 6 => num(i + 4, 2)?,
                Some(_) if b.len() == i + 5 => num(i + 3, 2)?,
                None => 0,
                _ => return Err(bad()),
            };
            let total = h * 60 + m;
            if c == b'+' {
                total
            } else {
                -total
            }
        }
        _ => return Err(bad()),
    };
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return Err(format!("bad month in {s:?}")),
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return Err(format!("date or time out of range in {s:?}"));
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_min * 60;
    Ok(secs * 1000 + millis)
}

/// Runs `sluice group ...`.
pub fn run(args: &GroupArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(run_async(args))
}

async fn run_async(args: &GroupArgs) -> anyhow::Result<()> {
    let config = args.client.client_config()?;
    let admin = args.client.connecting(Admin::connect(config)).await?;
    match &args.command {
        GroupCommand::List { state } => list(&admin, *state).await,
        GroupCommand::Describe {
            groups,
            members,
            state,
        } => {
            let mode = if *members {
                Mode::Members
            } else if *state {
                Mode::State
            } else {
                Mode::Offsets
            };
            let mut missing = Vec::new();
            for g in groups {
                if !describe(&admin, g, mode).await? {
                    missing.push(format!("Consumer group '{g}' does not exist."));
                }
            }
            if !missing.is_empty() {
                bail!("{}", missing.join(" "));
            }
            Ok(())
        }
        GroupCommand::ResetOffsets(r) => reset_offsets(&admin, r).await,
        GroupCommand::Delete { groups } => delete(&admin, groups).await,
    }
}

/// Left-aligned columns separated by a space (the last one unpadded).
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$} ", w = widths[i]));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(headers.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

async fn list(admin: &Admin, state: bool) -> anyhow::Result<()> {
    let groups = admin.list_groups().await?;
    if state {
        let rows: Vec<Vec<String>> = groups
            .iter()
            .map(|g| {
                vec![
                    g.group_id.clone(),
                    g.state.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        print!("{}", table(&["GROUP", "STATE"], &rows));
    } else {
        for g in groups {
            println!("{}", g.group_id);
        }
    }
    Ok(())
}

/// One group's description; `None` when it does not exist.
async fn describe_group(admin: &Admin, group: &str) -> anyhow::Result<Option<GroupDescription>> {
    let mut found = admin.describe_groups(&[group]).await?;
    if found.is_empty() {
        bail!("no description returned for group {group}");
    }
    let d = found.swap_remove(0);
    if d.error_code == GROUP_ID_NOT_FOUND || d.state == "Dead" {
        return Ok(None);
    }
    if let Some(e) = d.error() {
        return Err(e.into());
    }
    Ok(Some(d))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Offsets,
    Members,
    State,
}

/// Prints one group; `false` when it does not exist.
async fn describe(admin: &Admin, group: &str, mode: Mode) -> anyhow::Result<bool> {
    let Some(d) = describe_group(admin, group).await? else {
        return Ok(false);
    };
    let dash = || "-".to_string();
    match mode {
        Mode::State => {
            let coordinator = admin
                .find_coordinator(group)
                .await
                .map(|b| format!("{}:{} ({})", b.host, b.port, b.id))
                .unwrap_or_else(|_| dash());
            let strategy = if d.protocol.is_empty() {
                dash()
            } else {
                d.protocol.clone()
            };
            let row = vec![
                group.to_string(),
                coordinator,
                strategy,
                d.state.clone(),
                d.members.len().to_string(),
            ];
            println!();
            print!(
                "{}",
                table(
                    &[
                        "GROUP",
                        "COORDINATOR (ID)",
                        "ASSIGNMENT-STRATEGY",
                        "STATE",
                        "#MEMBERS"
                    ],
                    &[row]
                )
            );
            return Ok(true);
        }
        Mode::Members => {
            if d.members.is_empty() {
                println!("\nConsumer group '{group}' has no active members.");
                return Ok(true);
            }
            let rows: Vec<Vec<String>> = d
                .members
                .iter()
                .map(|m| {
                    vec![
                        group.to_string(),
                        m.member_id.clone(),
                        m.client_host.clone(),
                        m.client_id.clone(),
                        m.assignment.len().to_string(),
                    ]
                })
                .collect();
            println!();
            print!(
                "{}",
                table(
                    &["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
                    &rows
                )
            );
            return Ok(true);
        }
        Mode::Offsets => {}
    }

    let committed = admin.list_consumer_group_offsets(group, None).await?;
    // Owner of each assigned partition: (consumer id, host, client id).
    let mut owners: BTreeMap<TopicPartition, (String, String, String)> = BTreeMap::new();
    let mut idle_members = Vec::new();
    for m in &d.members {
        if m.assignment.is_empty() {
            idle_members.push(m);
        }
        for tp in &m.assignment {
            owners.insert(
                tp.clone(),
                (
                    m.member_id.clone(),
                    m.client_host.clone(),
                    m.client_id.clone(),
                ),
            );
        }
    }
    let partitions: BTreeSet<TopicPartition> =
        committed.keys().chain(owners.keys()).cloned().collect();
    let ends = log_end_offsets(admin, &partitions).await;

    if d.members.is_empty() {
        println!("\nConsumer group '{group}' has no active members.");
    } else if d.state == "PreparingRebalance" || d.state == "CompletingRebalance" {
        println!("\nWarning: Consumer group '{group}' is rebalancing.");
    }
    let mut rows = Vec::new();
    for tp in &partitions {
        let current = committed.get(tp).map(|o| o.offset);
        let end = ends.get(tp).copied();
        let lag = match (current, end) {
            (Some(c), Some(e)) => (e - c).max(0).to_string(),
            _ => dash(),
        };
        let (id, host, client) = owners
            .get(tp)
            .cloned()
            .unwrap_or_else(|| (dash(), dash(), dash()));
        rows.push(vec![
            group.to_string(),
            tp.topic.clone(),
            tp.partition.to_string(),
            current.map_or_else(dash, |c| c.to_string()),
            end.map_or_else(dash, |e| e.to_string()),
            lag,
            id,
            host,
            client,
        ]);
    }
    for m in idle_members {
        rows.push(vec![
            group.to_string(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
            m.member_id.clone(),
            m.client_host.clone(),
            m.client_id.clone(),
        ]);
    }
    if !rows.is_empty() {
        println!();
        print!(
            "{}",
            table(
                &[
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID",
                ],
                &rows
            )
        );
    }
    Ok(true)
}

/// Log end offsets, looked up per topic so one deleted topic does not hide
/// the others (its partitions are simply missing).
async fn log_end_offsets(
    admin: &Admin,
    partitions: &BTreeSet<TopicPartition>,
) -> BTreeMap<TopicPartition, i64> {
    let mut by_topic: BTreeMap<&str, Vec<(TopicPartition, OffsetSpec)>> = BTreeMap::new();
    for tp in partitions {
        by_topic
            .entry(tp.topic.as_str())
            .or_default()
            .push((tp.clone(), OffsetSpec::Latest));
    }
    let mut out = BTreeMap::new();
    for (topic, req) in by_topic {
        match admin.list_offsets(&req).await {
            Ok(found) => out.extend(found.into_iter().map(|(tp, i)| (tp, i.offset))),
            Err(e) => tracing::debug!(topic, error = %e, "cannot list log end offsets"),
        }
    }
    out
}

/// Offsets of `partitions` for `spec`, with a readable error.
async fn offsets_for(
    admin: &Admin,
    partitions: &BTreeSet<TopicPartition>,
    spec: OffsetSpec,
) -> anyhow::Result<BTreeMap<TopicPartition, i64>> {
    let req: Vec<(TopicPartition, OffsetSpec)> =
        partitions.iter().map(|tp| (tp.clone(), spec)).collect();
    let found = admin
        .list_offsets(&req)
        .await
        .context("cannot list partition offsets")?;
    Ok(found.into_iter().map(|(tp, i)| (tp, i.offset)).collect())
}

fn inactive_error(group: &str, state: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "Assignments can only be reset if the group '{group}' is inactive, but the current state is {state}."
    )
}

async fn reset_offsets(admin: &Admin, a: &ResetArgs) -> anyhow::Result<()> {
    let group = a.group.as_str();
    if group.trim().is_empty() {
        bail!("--group is empty");
    }
    if let Some(d) = describe_group(admin, group).await? {
        if !d.members.is_empty() || !(d.state == "Empty" || d.state == "Dead") {
            return Err(inactive_error(group, &d.state));
        }
    }
    let committed = admin.list_consumer_group_offsets(group, None).await?;

    let mut partitions: BTreeSet<TopicPartition> = BTreeSet::new();
    if a.all_topics {
        partitions.extend(committed.keys().cloned());
        if partitions.is_empty() {
            bail!("group {group} has no committed offsets to reset (name topics with --topic)");
        }
    }
    for spec in &a.topics {
        let topic = spec.topic.as_str();
        let info = match admin.describe_topics(&[topic]).await {
            Ok(mut v) if !v.is_empty() => v.swap_remove(0),
            Ok(_) => bail!("topic {topic} does not exist"),
            Err(e) if e.code() == Some(UNKNOWN_TOPIC_OR_PARTITION) => {
                bail!("topic {topic} does not exist")
            }
            Err(e) => return Err(e).with_context(|| format!("cannot look up topic {topic}")),
        };
        if spec.partitions.is_empty() {
            partitions.extend(
                info.partitions
                    .keys()
                    .map(|p| TopicPartition::new(topic, *p)),
            );
        }
        for p in &spec.partitions {
            if !info.partitions.contains_key(p) {
                bail!("partition {p} of topic {topic} does not exist");
            }
            partitions.insert(TopicPartition::new(topic, *p));
        }
    }

    let earliest = offsets_for(admin, &partitions, OffsetSpec::Earliest).await?;
    let latest = offsets_for(admin, &partitions, OffsetSpec::Latest).await?;
    let by_time = match a.to_datetime {
        Some(ts) => offsets_for(admin, &partitions, OffsetSpec::Timestamp(ts)).await?,
        None => BTreeMap::new(),
    };
    let mut plan: BTreeMap<TopicPartition, OffsetAndMetadata> = BTreeMap::new();
    for tp in &partitions {
        let lo = earliest.get(tp).copied().unwrap_or(0);
        let hi = latest.get(tp).copied().unwrap_or(lo).max(lo);
        let target = if a.to_earliest {
            lo
        } else if a.to_latest {
            hi
        } else if let Some(n) = a.to_offset {
            n
        } else if a.to_datetime.is_some() {
            // -1: every record is older than the time.
            match by_time.get(tp) {
                Some(o) if *o >= 0 => *o,
                _ => hi,
            }
        } else if let Some(n) = a.shift_by {
            let Some(c) = committed.get(tp) else {
                bail!(
                    "cannot shift the offset of {tp}: group {group} has no committed offset for it"
                );
            };
            c.offset.saturating_add(n)
        } else {
            bail!("give one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by");
        };
        plan.insert(tp.clone(), OffsetAndMetadata::new(target.clamp(lo, hi)));
    }

    let rows: Vec<Vec<String>> = plan
        .iter()
        .map(|(tp, o)| {
            vec![
                group.to_string(),
                tp.topic.clone(),
                tp.partition.to_string(),
                o.offset.to_string(),
            ]
        })
        .collect();
    println!();
    print!(
        "{}",
        table(&["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], &rows)
    );

    if !a.execute {
        if !a.dry_run {
            eprintln!("note: dry run, nothing changed (add --execute to commit these offsets)");
        }
        return Ok(());
    }
    match admin.alter_consumer_group_offsets(group, &plan).await {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.code(), Some(UNKNOWN_MEMBER_ID | REBALANCE_IN_PROGRESS)) => {
            Err(inactive_error(group, "active"))
        }
        Err(e) => Err(e).with_context(|| format!("cannot reset the offsets of group {group}")),
    }
}

fn delete_error(group: &str, e: &ClientError) -> String {
    match e.code() {
        Some(GROUP_ID_NOT_FOUND) => format!("Consumer group '{group}' does not exist."),
        Some(NON_EMPTY_GROUP) => {
            format!("Consumer group '{group}' could not be deleted: it has active members.")
        }
        _ => format!("Consumer group '{group}' could not be deleted: {e}"),
    }
}

async fn delete(admin: &Admin, groups: &[String]) -> anyhow::Result<()> {
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    let results = admin.delete_groups(&names).await?;
    let mut errors = Vec::new();
    for (group, r) in results {
        match r {
            Ok(()) => println!("Deleted consumer group '{group}'."),
            Err(e) => errors.push(delete_error(&group, &e)),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join(" "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00"), Ok(0));
        assert_eq!(parse_datetime("1970-01-01T00:00:00.5Z"), Ok(500));
        assert_eq!(
            parse_datetime("2026-01-01T00:00:00.000"),
            Ok(1_767_225_600_000)
        );
        assert_eq!(
            parse_datetime("2024-02-29T12:34:56.789Z"),
            Ok(1_709_210_096_789)
        );
        assert_eq!(
            parse_datetime("2024-02-29T14:34:56.789+02:00"),
            Ok(1_709_210_096_789)
        );
        assert_eq!(
            parse_datetime("2000-03-01T00:00:00-0100"),
            Ok(951_872_400_000)
        );
        for bad in [
            "2023-02-29T00:00:00",
            "2026-13-01T00:00:00",
            "2026-01-01",
            "2026-01-01T25:00:00",
            "2026-01-01T00:00:00.",
            "2026-01-01T00:00:00Zx",
            "yesterday",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn topic_specs() {
        assert_eq!(
            parse_topic_spec("orders"),
            Ok(TopicSpec {
                topic: "orders".into(),
                partitions: vec![]
            })
        );
        assert_eq!(
            parse_topic_spec("orders:0,2"),
            Ok(TopicSpec {
                topic: "orders".into(),
                partitions: vec![0, 2]
            })
        );
        assert!(parse_topic_spec("orders:x").is_err());
        assert!(parse_topic_spec(":1").is_err());
    }

    #[test]
    fn tables() {
        let t = table(
            &["A", "LONGER"],
            &[
                vec!["xyz".into(), "1".into()],
                vec!["q".into(), "22".into()],
            ],
        );
        assert_eq!(t, "A   LONGER\nxyz 1\nq   22\n");
    }
}
