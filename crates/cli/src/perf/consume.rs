//! `sluice perf consume`: like kafka-consumer-perf-test.sh. Reads
//! `--num-records` records of a topic from the beginning (all partitions
//! assigned, no group; or with `--group`, subscribed in that group) and
//! reports Kafka's figures: start and end time, MB and records consumed and
//! per second, the time spent joining the group (`rebalance.time.ms`) and
//! the throughput of the remaining fetch time. Fails when no record arrives
//! for `--idle-timeout-ms`, so it never hangs on a topic holding fewer
//! records than asked for.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use sluice_client::consumer::{Consumer, ConsumerConfig, OffsetReset, RebalanceListener};
use sluice_client::{Admin, TopicPartition};

use super::{per_sec, Counters, Json, Reporter, Summary, MB};
use crate::client_args::ClientArgs;

/// Longest single `poll`, so the idle limit is checked often enough.
const POLL_SLICE: Duration = Duration::from_millis(200);

/// Kafka's header line.
pub const HEADER: &str = "start.time, end.time, data.consumed.in.MB, MB.sec, \
     data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, \
     fetch.nMsg.sec";

/// `sluice perf consume`.
#[derive(Debug, clap::Args)]
pub struct PerfConsumeArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Topic to read (must exist).
    #[arg(long)]
    topic: String,
    /// Stop after this many records.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    num_records: u64,
    /// Join this consumer group (subscribe; committed offsets are used and
    /// auto-committed, else the log start). Without it, every partition is
    /// assigned and read from the log start, and nothing is committed.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Most bytes fetched per partition per request
    /// (`max.partition.fetch.bytes`).
    #[arg(
        long,
        visible_alias = "max-partition-fetch-bytes",
        value_name = "BYTES",
        default_value_t = 1_048_576,
        value_parser = clap::value_parser!(i32).range(1..)
    )]
    fetch_size: i32,
    /// Most bytes per fetch response (`fetch.max.bytes`).
    #[arg(long, value_name = "BYTES", default_value_t = 52_428_800, value_parser = clap::value_parser!(i32).range(1..))]
    fetch_max_bytes: i32,
    /// Most records one poll returns (`max.poll.records`).
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    max_poll_records: u32,
    /// Fail when no record arrives for this long (after joining the group,
    /// and for the join itself).
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_ms: u64,
    /// Leave out the header line of the text output.
    #[arg(long, conflicts_with = "json")]
    hide_header: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Notes when the group assigned partitions (for `rebalance.time.ms` and
/// the idle clock).
#[derive(Debug, Clone, Default)]
struct AssignedAt(Arc<Mutex<Option<Instant>>>);

impl AssignedAt {
    fn get(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RebalanceListener for AssignedAt {
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        if !partitions.is_empty() {
            let mut at = self.0.lock().unwrap_or_else(|e| e.into_inner());
            at.get_or_insert_with(Instant::now);
        }
    }
}

/// The outcome of a run, in Kafka's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumeReport {
    /// Records, bytes (key + value, as Kafka counts) and elapsed time.
    pub summary: Summary,
    /// Wall-clock start (before subscribe/assign).
    pub start: SystemTime,
    /// Wall-clock end (after the last record).
    pub end: SystemTime,
    /// Time from the start to the first assignment (0 without a group).
    pub rebalance: Duration,
}

impl ConsumeReport {
    /// `elapsed - rebalance`.
    pub fn fetch_time(&self) -> Duration {
        self.summary.elapsed.saturating_sub(self.rebalance)
    }

    /// Kafka's data line (times in UTC, `yyyy-MM-dd HH:mm:ss:SSS`).
    pub fn line(&self) -> String {
        let s = &self.summary;
        let fetch = self.fetch_time();
        format!(
            "{}, {}, {:.4}, {:.4}, {}, {:.4}, {}, {}, {:.4}, {:.4}",
            format_time(self.start),
            format_time(self.end),
            s.bytes as f64 / MB,
            s.mb_per_sec(),
            s.records,
            s.records_per_sec(),
            self.rebalance.as_millis(),
            fetch.as_millis(),
            per_sec(s.bytes as f64 / MB, fetch),
            per_sec(s.records as f64, fetch),
        )
    }

    /// The summary's JSON plus start/end times and the rebalance/fetch
    /// split.
    pub fn to_json(&self) -> Json {
        let s = &self.summary;
        let fetch = self.fetch_time();
        let mut j = s.to_json();
        j.push("start_time", Json::Str(format_time(self.start)));
        j.push("end_time", Json::Str(format_time(self.end)));
        j.push("rebalance_ms", Json::Int(millis(self.rebalance)));
        j.push("fetch_ms", Json::Int(millis(fetch)));
        j.push(
            "fetch_mb_per_sec",
            Json::Num(per_sec(s.bytes as f64 / MB, fetch)),
        );
        j.push(
            "fetch_records_per_sec",
            Json::Num(per_sec(s.records as f64, fetch)),
        );
        j
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `yyyy-MM-dd HH:mm:ss:SSS` in UTC (Kafka's format; Kafka uses local time).
pub fn format_time(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}:{:03}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Runs `sluice perf consume`.
pub async fn run(args: &PerfConsumeArgs) -> anyhow::Result<()> {
    let mut config = ConsumerConfig::new(args.client.client_config()?);
    config.group_id = args.group.clone();
    config.auto_offset_reset = OffsetReset::Earliest;
    config.max_partition_fetch_bytes = args.fetch_size;
    config.fetch_max_bytes = args.fetch_max_bytes;
    config.max_poll_records = args.max_poll_records as usize;
    let mut consumer = args.client.connecting(Consumer::new(config)).await?;
    let result = consume(&mut consumer, args).await;
    let closed = consumer.close().await;
    let report = result?;
    closed.context("cannot close the consumer")?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        if !args.hide_header {
            println!("{HEADER}");
        }
        println!("{}", report.line());
    }
    Ok(())
}

/// The timed part: subscribe or assign, then poll until `--num-records`.
async fn consume(consumer: &mut Consumer, args: &PerfConsumeArgs) -> anyhow::Result<ConsumeReport> {
    let topic = args.topic.as_str();
    let admin = Admin::from_cluster(consumer.cluster().clone());
    let info = match admin.describe_topics(&[topic]).await {
        Ok(mut v) if !v.is_empty() => v.swap_remove(0),
        Ok(_) => bail!("topic {topic} does not exist"),
        Err(e) if e.code() == Some(3) => bail!("topic {topic} does not exist"),
        Err(e) => return Err(e).with_context(|| format!("cannot look up topic {topic}")),
    };
    let assigned = AssignedAt::default();
    let start_wall = SystemTime::now();
    let start = Instant::now();
    if args.group.is_some() {
        consumer.set_rebalance_listener(Box::new(assigned.clone()));
        consumer.subscribe(&[topic])?;
    } else {
        let partitions: Vec<TopicPartition> = info
            .partitions
            .keys()
            .map(|p| TopicPartition::new(topic, *p))
            .collect();
        consumer.assign(&partitions)?;
        consumer.seek_to_beginning(&[])?;
    }
    let counters = Arc::new(Counters::default());
    let reporter = Reporter::start(counters.clone(), args.num_records, None);
    let result = poll_loop(consumer, args, &counters, &assigned, start).await;
    let end = Instant::now();
    let end_wall = SystemTime::now();
    reporter.finish().await;
    result?;
    let rebalance = if args.group.is_some() {
        assigned
            .get()
            .map_or(Duration::ZERO, |a| a.saturating_duration_since(start))
    } else {
        Duration::ZERO
    };
    Ok(ConsumeReport {
        summary: Summary {
            records: counters.records(),
            bytes: counters.bytes(),
            elapsed: end - start,
            latency: None,
        },
        start: start_wall,
        end: end_wall,
        rebalance,
    })
}

async fn poll_loop(
    consumer: &mut Consumer,
    args: &PerfConsumeArgs,
    counters: &Counters,
    assigned: &AssignedAt,
    start: Instant,
) -> anyhow::Result<()> {
    let idle = Duration::from_millis(args.idle_timeout_ms);
    let mut last_record: Option<Instant> = None;
    let mut consumed = 0u64;
    while consumed < args.num_records {
        let now = Instant::now();
        // The idle clock runs from the start, restarts at the assignment
        // and at every record.
        let since = last_record
            .into_iter()
            .chain(assigned.get())
            .chain(Some(start))
            .max()
            .unwrap_or(start);
        let waited = now.saturating_duration_since(since);
        if waited >= idle {
            let what = if args.group.is_some() && assigned.get().is_none() {
                format!("no partition of {} was assigned", args.topic)
            } else {
                "no record arrived".to_string()
            };
            bail!(
                "{what} within the idle timeout of {} ms (--idle-timeout-ms); \
                 consumed {consumed} of {} records",
                args.idle_timeout_ms,
                args.num_records
            );
        }
        let records = consumer
            .poll((idle - waited).min(POLL_SLICE))
            .await
            .with_context(|| format!("cannot consume from {}", args.topic))?;
        if records.is_empty() {
            continue;
        }
        last_record = Some(Instant::now());
        let wanted = usize::try_from(args.num_records - consumed).unwrap_or(usize::MAX);
        let taken = &records[..records.len().min(wanted)];
        let bytes: usize = taken
            .iter()
            .map(|r| {
                r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len())
            })
            .sum();
        counters.record_batch(taken.len() as u64, bytes as u64);
        consumed += taken.len() as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_format() {
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01 00:00:00:000");
        let t = UNIX_EPOCH + Duration::from_millis(1_671_792_068_749);
        assert_eq!(format_time(t), "2022-12-23 10:41:08:749");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(format_time(leap), "2000-02-29 00:00:00:000");
    }

    #[test]
    fn report_line_and_json() {
        let r = ConsumeReport {
            summary: Summary {
                records: 1000,
                bytes: 2 * 1024 * 1024,
                elapsed: Duration::from_secs(2),
                latency: None,
            },
            start: UNIX_EPOCH,
            end: UNIX_EPOCH + Duration::from_secs(2),
            rebalance: Duration::from_secs(1),
        };
        assert_eq!(HEADER.split(", ").count(), 10);
        assert_eq!(
            r.line(),
            "1970-01-01 00:00:00:000, 1970-01-01 00:00:02:000, 2.0000, 1.0000, 1000, \
             500.0000, 1000, 1000, 2.0000, 1000.0000"
        );
        assert_eq!(
            r.to_json().to_string(),
            "{\"records\":1000,\"bytes\":2097152,\"elapsed_s\":2,\"records_per_sec\":500,\
             \"mb_per_sec\":1,\"start_time\":\"1970-01-01 00:00:00:000\",\
             \"end_time\":\"1970-01-01 00:00:02:000\",\"rebalance_ms\":1000,\"fetch_ms\":1000,\
             \"fetch_mb_per_sec\":2,\"fetch_records_per_sec\":1000}"
        );
    }
}
