//! `sluice consume --topic T`: like kafka-console-consumer.sh. Prints the
//! records of one topic to stdout, one line each: the value only by
//! default (`null` for a tombstone), `KEY<SEP>VALUE` with `--print-key`, a
//! `--format` template, or one JSON object with `--json`.
//!
//! Without `--group` every partition (or just `--partition N`) is assigned
//! manually and nothing is committed; `--offset` then picks the start of
//! that partition. With `--group` the consumer joins the group (`subscribe`)
//! and its position is committed periodically and on exit (exactly up to the
//! last record printed, also when `--max-messages` stops in the middle of a
//! batch). `--from-beginning` sets `auto.offset.reset=earliest` (default
//! latest).
//!
//! Stops after `--max-messages` records, after `--idle-timeout-ms` without
//! a record, on SIGINT/SIGTERM (a second signal exits at once) and when
//! stdout is closed (e.g. `| head`), in all cases closing the consumer so the
//! group rebalances at once, and exiting 0. Output is flushed after each
//! poll. Errors (unknown topic, bad flags, unreachable broker) are returned,
//! which `main` prints as one `sluice: ...` line before exiting non-zero.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sluice_client::admin::IsolationLevel;
use sluice_client::consumer::assignor::assignor_by_name;
use sluice_client::consumer::{
    Consumer, ConsumerConfig, ConsumerRecord, OffsetReset, PartitionAssignor,
};
use sluice_client::{Admin, TopicPartition};

use crate::client_args::ClientArgs;

/// Longest a single `poll` waits, so stop requests are noticed quickly.
const POLL_SLICE: Duration = Duration::from_millis(250);

/// Least time `--idle-timeout-ms` allows a group member to get its first
/// partitions (a fresh group waits `group.initial.rebalance.delay.ms`, 3 s
/// by default, before assigning).
const JOIN_ALLOWANCE: Duration = Duration::from_secs(10);

/// `sluice consume`.
#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Topic to consume (must exist).
    #[arg(long)]
    topic: String,
    /// Consumer group to join; offsets are committed to it (without it,
    /// all partitions are read with no group and no commits).
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Start from the earliest offset when there is no committed offset
    /// (auto.offset.reset=earliest; default latest).
    #[arg(long)]
    from_beginning: bool,
    /// Read only this partition (not with --group).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    partition: Option<i32>,
    /// Where to start in --partition: an offset, earliest or latest.
    #[arg(long, value_name = "N|earliest|latest", value_parser = parse_start, allow_hyphen_values = true)]
    offset: Option<Start>,
    /// Exit after printing this many records.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_messages: Option<u64>,
    /// Exit when no record arrived for this long (default: wait forever);
    /// with --group, counted from the first assignment (joining may take
    /// up to max(MS, 10 s)).
    #[arg(long, value_name = "MS")]
    idle_timeout_ms: Option<u64>,
    /// Output template per record, e.g. '%t/%p@%o %k=%v'. Placeholders:
    /// %t topic, %p partition, %o offset, %k key, %v value, %T timestamp
    /// (ms), %h headers (k=v,...), %K key length, %S value length, %%;
    /// escapes \n \t \\. A newline is added after each record.
    #[arg(long, value_name = "TEMPLATE", value_parser = Template::parse, conflicts_with_all = ["json", "print_key"])]
    format: Option<Template>,
    /// Print the key before the value, separated by --key-separator.
    #[arg(long)]
    print_key: bool,
    /// Separator between key and value with --print-key.
    #[arg(long, value_name = "SEP", default_value = "\t")]
    key_separator: String,
    /// One JSON object per record: topic, partition, offset, timestamp,
    /// timestamp_type, key, value, headers (strings, lossy UTF-8).
    #[arg(long, conflicts_with = "print_key")]
    json: bool,
    /// read_uncommitted (default) or read_committed (skip aborted
    /// transactions, stop at the last stable offset).
    #[arg(long, value_name = "LEVEL", default_value = "read_uncommitted", value_parser = parse_isolation)]
    isolation_level: IsolationLevel,
    /// Group partition assignor, in preference order; repeatable
    /// (`partition.assignment.strategy`): range, roundrobin, sticky,
    /// cooperative-sticky. Default: range, then cooperative-sticky.
    #[arg(long = "assignor", value_name = "NAME", value_parser = parse_assignor)]
    assignors: Vec<Arc<dyn PartitionAssignor>>,
}

/// `--offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Offset(i64),
    Earliest,
    Latest,
}

fn parse_start(s: &str) -> Result<Start, String> {
    match s.trim() {
        "earliest" => Ok(Start::Earliest),
        "latest" => Ok(Start::Latest),
        n => match n.parse::<i64>() {
            Ok(o) if o >= 0 => Ok(Start::Offset(o)),
            _ => Err(format!(
                "expected a non-negative offset, earliest or latest, got {s:?}"
            )),
        },
    }
}

fn parse_isolation(s: &str) -> Result<IsolationLevel, String> {
    match s.trim() {
        "read_uncommitted" => Ok(IsolationLevel::ReadUncommitted),
        "read_committed" => Ok(IsolationLevel::ReadCommitted),
        _ => Err(format!(
            "expected read_uncommitted or read_committed, got {s:?}"
        )),
    }
}

fn parse_assignor(s: &str) -> Result<Arc<dyn PartitionAssignor>, String> {
    assignor_by_name(s.trim()).ok_or_else(|| {
        format!("unknown assignor {s:?} (range, roundrobin, sticky, cooperative-sticky)")
    })
}

/// One part of a `--format` template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Key,
    Value,
    Timestamp,
    Headers,
    KeyLen,
    ValueLen,
}

/// A parsed `--format` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

impl Template {
    fn parse(s: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut lit = Vec::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            match c {
                '%' => {
                    let p = match chars.next() {
                        Some('%') => {
                            lit.push(b'%');
                            continue;
                        }
                        Some('t') => Piece::Topic,
                        Some('p') => Piece::Partition,
                        Some('o') => Piece::Offset,
                        Some('k') => Piece::Key,
                        Some('v') => Piece::Value,
                        Some('T') => Piece::Timestamp,
                        Some('h') => Piece::Headers,
                        Some('K') => Piece::KeyLen,
                        Some('S') => Piece::ValueLen,
                        Some(other) => {
                            return Err(format!(
                            "unknown placeholder %{other} (known: %t %p %o %k %v %T %h %K %S %%)"
                        ))
                        }
                        None => return Err("the template ends with a lone %".into()),
                    };
                    if !lit.is_empty() {
                        pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                    }
                    pieces.push(p);
                }
                '\\' => match chars.next() {
                    Some('n') => lit.push(b'\n'),
                    Some('t') => lit.push(b'\t'),
                    Some('\\') => lit.push(b'\\'),
                    Some(other) => {
                        lit.push(b'\\');
                        push_char(&mut lit, other);
                    }
                    None => lit.push(b'\\'),
                },
                c => push_char(&mut lit, c),
            }
        }
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(Template(pieces))
    }
}

fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

/// How records are printed.
#[derive(Debug)]
enum Output {
    /// The value, or `KEY<SEP>VALUE` when `key_separator` is set.
    Plain {
        key_separator: Option<Vec<u8>>,
    },
    Template(Template),
    Json,
}

impl Output {
    fn write(&self, out: &mut impl Write, r: &ConsumerRecord) -> std::io::Result<()> {
        match self {
            Output::Plain { key_separator } => {
                if let Some(sep) = key_separator {
                    out.write_all(or_null(&r.key))?;
                    out.write_all(sep)?;
                }
                out.write_all(or_null(&r.value))?;
            }
            Output::Template(t) => {
                for p in &t.0 {
                    match p {
                        Piece::Lit(b) => out.write_all(b)?,
                        Piece::Topic => out.write_all(r.topic.as_bytes())?,
                        Piece::Partition => write!(out, "{}", r.partition)?,
                        Piece::Offset => write!(out, "{}", r.offset)?,
                        Piece::Key => out.write_all(or_null(&r.key))?,
                        Piece::Value => out.write_all(or_null(&r.value))?,
                        Piece::Timestamp => write!(out, "{}", r.timestamp)?,
                        Piece::KeyLen => write!(out, "{}", len_or_minus_one(&r.key))?,
                        Piece::ValueLen => write!(out, "{}", len_or_minus_one(&r.value))?,
                        Piece::Headers => {
                            for (i, (k, v)) in r.headers.iter().enumerate() {
                                if i > 0 {
                                    out.write_all(b",")?;
                                }
                                out.write_all(k.as_bytes())?;
                                if let Some(v) = v {
                                    out.write_all(b"=")?;
                                    out.write_all(v)?;
                                }
                            }
                        }
                    }
                }
            }
            Output::Json => out.write_all(json_record(r).as_bytes())?,
        }
        out.write_all(b"\n")
    }
}

fn or_null<B: Deref<Target = [u8]>>(b: &Option<B>) -> &[u8] {
    b.as_deref().unwrap_or(b"null")
}

fn len_or_minus_one<B: Deref<Target = [u8]>>(b: &Option<B>) -> i64 {
    b.as_ref().map_or(-1, |b| b.len() as i64)
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Bytes as a JSON string (lossy UTF-8), or `null`.
fn json_bytes<B: Deref<Target = [u8]>>(b: &Option<B>) -> String {
    match b {
        Some(b) => json_string(&String::from_utf8_lossy(b)),
        None => "null".into(),
    }
}

fn json_record(r: &ConsumerRecord) -> String {
    let headers: Vec<String> = r
        .headers
        .iter()
        .map(|(k, v)| format!("{{\"key\":{},\"value\":{}}}", json_string(k), json_bytes(v)))
        .collect();
    format!(
        "{{\"topic\":{},\"partition\":{},\"offset\":{},\"timestamp\":{},\"timestamp_type\":\"{}\",\"key\":{},\"value\":{},\"headers\":[{}]}}",
        json_string(&r.topic),
        r.partition,
        r.offset,
        r.timestamp,
        if r.log_append_time { "LogAppendTime" } else { "CreateTime" },
        json_bytes(&r.key),
        json_bytes(&r.value),
        headers.join(",")
    )
}

/// Runs `sluice consume`.
pub fn run(args: &ConsumeArgs) -> anyhow::Result<()> {
    if args.partition.is_some() && args.group.is_some() {
        bail!("--partition cannot be used with --group (group members get their partitions from the group)");
    }
    if args.offset.is_some() && args.partition.is_none() {
        bail!("--offset needs --partition");
    }
    if args.offset.is_some() && args.from_beginning {
        bail!("--offset and --from-beginning cannot be used together");
    }
    if matches!(&args.group, Some(g) if g.trim().is_empty()) {
        bail!("--group is empty");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(run_async(args));
    rt.shutdown_background();
    result
}

/// Sets `stop` on the first SIGINT/SIGTERM; exits the process at once on a
/// second one.
fn watch_signals(stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        stop.store(true, Ordering::SeqCst);
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        std::process::exit(130);
    });
    Ok(())
}

async fn run_async(args: &ConsumeArgs) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(stop.clone())?;

    let mut config = ConsumerConfig::new(args.client.client_config()?);
    config.group_id = args.group.clone();
    config.auto_offset_reset = if args.from_beginning {
        OffsetReset::Earliest
    } else {
        OffsetReset::Latest
    };
    config.isolation_level = args.isolation_level;
    if !args.assignors.is_empty() {
        config.assignors.clone_from(&args.assignors);
    }
    let mut consumer = args.client.connecting(Consumer::new(config)).await?;

    let result = setup(&mut consumer, args).await;
    let result = match result {
        Ok(()) => consume(&mut consumer, args, &stop).await,
        Err(e) => Err(e),
    };
    let closed = consumer.close().await;
    let count = result?;
    closed.context("cannot close the consumer")?;
    eprintln!("Processed a total of {count} messages");
    Ok(())
}

/// Checks the topic and subscribes or assigns.
async fn setup(consumer: &mut Consumer, args: &ConsumeArgs) -> anyhow::Result<()> {
    let admin = Admin::from_cluster(consumer.cluster().clone());
    let topic = args.topic.as_str();
    let info = match admin.describe_topics(&[topic]).await {
        Ok(mut v) if !v.is_empty() => v.swap_remove(0),
        Ok(_) => bail!("topic {topic} does not exist"),
        Err(e) if e.code() == Some(3) => bail!("topic {topic} does not exist"),
        Err(e) => return Err(e).with_context(|| format!("cannot look up topic {topic}")),
    };
    if args.group.is_some() {
        consumer.subscribe(&[topic])?;
        return Ok(());
    }
    let partitions: Vec<TopicPartition> = match args.partition {
        Some(p) => {
            if !info.partitions.contains_key(&p) {
                bail!(
                    "partition {p} of topic {topic} does not exist (it has {} partitions)",
                    info.partitions.len()
                );
            }
            vec![TopicPartition::new(topic, p)]
        }
        None => info
            .partitions
            .keys()
            .map(|p| TopicPartition::new(topic, *p))
            .collect(),
    };
    consumer.assign(&partitions)?;
    if let Some(start) = args.offset {
        match start {
            Start::Offset(o) => {
                for tp in &partitions {
                    consumer.seek(tp, o)?;
                }
            }
            Start::Earliest => consumer.seek_to_beginning(&partitions)?,
            Start::Latest => consumer.seek_to_end(&partitions)?,
        }
    }
    Ok(())
}

/// The poll loop; returns the number of records printed.
async fn consume(
    consumer: &mut Consumer,
    args: &ConsumeArgs,
    stop: &AtomicBool,
) -> anyhow::Result<u64> {
    let output = if args.json {
        Output::Json
    } else if let Some(t) = &args.format {
        Output::Template(t.clone())
    } else {
        Output::Plain {
            key_separator: args
                .print_key
                .then(|| args.key_separator.as_bytes().to_vec()),
        }
    };
    let idle = args.idle_timeout_ms.map(Duration::from_millis);
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    let mut count: u64 = 0;
    let mut last_record = Instant::now();
    // The idle clock restarts when a group member first gets partitions.
    let mut assigned = args.group.is_none();
    // First record returned but not printed, per partition, when
    // --max-messages stops in the middle of a batch.
    let mut unprinted: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let mut wait = POLL_SLICE;
        if !assigned && !consumer.assignment().is_empty() {
            assigned = true;
            last_record = Instant::now();
        }
        if let Some(idle) = idle {
            let limit = if assigned {
                idle
            } else {
                idle.max(JOIN_ALLOWANCE)
            };
            let left = limit.saturating_sub(last_record.elapsed());
            if left.is_zero() {
                break;
            }
            wait = wait.min(left);
        }
        let records = consumer.poll(wait).await?;
        if !records.is_empty() {
            last_record = Instant::now();
        }
        let mut done = false;
        let mut pipe_closed = false;
        for r in &records {
            if done || pipe_closed {
                unprinted
                    .entry(TopicPartition::new(&*r.topic, r.partition))
                    .or_insert(r.offset);
                continue;
            }
            match output.write(&mut out, r) {
                Ok(()) => count += 1,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => pipe_closed = true,
                Err(e) => return Err(e).context("cannot write to stdout"),
            }
            done = args.max_messages.is_some_and(|m| count >= m);
        }
        match out.flush() {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => pipe_closed = true,
            Err(e) => return Err(e).context("cannot write to stdout"),
        }
        if done || pipe_closed {
            break;
        }
    }
    // Commit (on close) exactly up to the last record printed.
    for (tp, offset) in &unprinted {
        consumer.seek(tp, *offset)?;
    }
    // A closed pipe leaves unwritten bytes in the buffer: drop them.
    let (_, _) = out.into_parts();
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 2,
            offset: 7,
            timestamp: 1_700_000_000_000,
            log_append_time: false,
            leader_epoch: 0,
            key: Some(b"k1".to_vec().into()),
            value: Some(b"v \"1\"\n".to_vec().into()),
            headers: vec![("h".into(), Some(b"x".to_vec().into())), ("n".into(), None)],
        }
    }

    fn render(o: &Output, r: &ConsumerRecord) -> String {
        let mut buf = Vec::new();
        assert!(o.write(&mut buf, r).is_ok());
        String::from_utf8_lossy(&buf).into_owned()
    }

    #[test]
    fn templates() {
        let t = Template::parse("%t/%p@%o %k=%v %T [%h] %K %S 100%%\\t.").ok();
        let t = t.unwrap_or_else(|| panic!("template should parse"));
        let mut r = record();
        r.value = Some(b"v".to_vec().into());
        assert_eq!(
            render(&Output::Template(t), &r),
            "t/2@7 k1=v 1700000000000 [h=x,n] 2 1 100%\t.\n"
        );
        assert!(Template::parse("%x").is_err());
        assert!(Template::parse("abc%").is_err());
        assert_eq!(
            Template::parse("a\\qb"),
            Ok(Template(vec![Piece::Lit(b"a\\qb".to_vec())]))
        );
    }

    #[test]
    fn plain_and_nulls() {
        let mut r = record();
        r.value = None;
        r.key = None;
        assert_eq!(
            render(
                &Output::Plain {
                    key_separator: None
                },
                &r
            ),
            "null\n"
        );
        let sep = Output::Plain {
            key_separator: Some(b":".to_vec()),
        };
        assert_eq!(render(&sep, &record()), "k1:v \"1\"\n\n");
    }

    #[test]
    fn json_escaping() {
        assert_eq!(json_string("a\"b\\c\u{1}\té"), "\"a\\\"b\\\\c\\u0001\\té\"");
        assert_eq!(
            render(&Output::Json, &record()),
            "{\"topic\":\"t\",\"partition\":2,\"offset\":7,\"timestamp\":1700000000000,\
             \"timestamp_type\":\"CreateTime\",\"key\":\"k1\",\"value\":\"v \\\"1\\\"\\n\",\
             \"headers\":[{\"key\":\"h\",\"value\":\"x\"},{\"key\":\"n\",\"value\":null}]}\n"
        );
    }

    #[test]
    fn start_and_isolation() {
        assert_eq!(parse_start("earliest"), Ok(Start::Earliest));
        assert_eq!(parse_start("latest"), Ok(Start::Latest));
        assert_eq!(parse_start("42"), Ok(Start::Offset(42)));
        assert!(parse_start("-1").is_err());
        assert!(parse_start("soon").is_err());
        assert_eq!(
            parse_isolation("read_committed"),
            Ok(IsolationLevel::ReadCommitted)
        );
        assert!(parse_isolation("dirty").is_err());
    }
}
