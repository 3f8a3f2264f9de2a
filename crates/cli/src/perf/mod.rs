//! `sluice perf ...`: load generators in the style of Kafka's
//! kafka-producer-perf-test.sh, plus the pieces every perf subcommand
//! shares:
//!
//! - [`Histogram`]: a log-linear latency histogram (microsecond input,
//!   < 0.2 % relative error, mergeable across tasks) and its
//!   [`LatencySummary`] (avg, p50, p95, p99, p99.9, max);
//! - [`Counters`]: lock-free running totals plus a resettable *window*
//!   (records, bytes, latency sum/max) that [`Reporter`] prints every 5 s
//!   and that drives the progress bar (drawn on stderr only when stderr is
//!   a terminal);
//! - [`Summary`]: the final numbers, as Kafka's one-line text
//!   ([`Summary::produce_line`]) or one JSON object ([`Summary::to_json`],
//!   built with [`Json`] so other subcommands can add their own fields);
//! - [`Throttle`]: a records/s cap like Kafka's `ThroughputThrottler`.
//!
//! The subcommands: [`produce`] (kafka-producer-perf-test.sh), [`consume`]
//! (kafka-consumer-perf-test.sh: records/s and MB/s, no per-record
//! latency, `Summary` with `latency: None`) and [`e2e`] (produce-to-consume
//! latency, like Kafka's EndToEndLatency tool); [`limits`] measures the
//! machine (loopback TCP, sequential disk writes) for comparison.

pub mod consume;
pub mod e2e;
pub mod limits;
pub mod produce;

use std::fmt::{self, Write as _};
use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// `sluice perf`.
#[derive(Debug, clap::Args)]
pub struct PerfArgs {
    #[command(subcommand)]
    command: PerfCommand,
}

/// The perf subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum PerfCommand {
    /// Produce generated records as fast as possible (or at a fixed rate) and
    /// report throughput and latency percentiles, like
    /// kafka-producer-perf-test.sh.
    Produce(produce::PerfProduceArgs),
    /// Read records from the beginning of a topic as fast as possible and
    /// report throughput, like kafka-consumer-perf-test.sh.
    Consume(consume::PerfConsumeArgs),
    /// Produce records at a fixed rate and consume them in the same
    /// process, reporting produce-to-consume latency percentiles, like
    /// Kafka's EndToEndLatency tool.
    E2e(e2e::PerfE2eArgs),
    /// Measure TCP throughput over 127.0.0.1 (a sender and a receiver
    /// thread): the ceiling for produce and consume on this machine.
    Loopback(limits::LoopbackArgs),
    /// Measure sequential write throughput into a folder (optionally with
    /// fdatasync at the end): the ceiling for produce on this disk.
    Disk(limits::DiskArgs),
}

/// Runs `sluice perf ...` on a multi-threaded runtime.
pub fn run(args: &PerfArgs) -> anyhow::Result<()> {
    match &args.command {
        PerfCommand::Loopback(a) => return limits::loopback(a),
        PerfCommand::Disk(a) => return limits::disk(a),
        _ => {}
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice-perf")
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(async {
        match &args.command {
            PerfCommand::Produce(a) => produce::run(a).await,
            PerfCommand::Consume(a) => consume::run(a).await,
            PerfCommand::E2e(a) => e2e::run(a).await,
            PerfCommand::Loopback(_) | PerfCommand::Disk(_) => Ok(()),
        }
    });
    // Leftover tasks (e.g. deliveries after a failure) must not delay exit.
    rt.shutdown_background();
    result
}

/// 1024 * 1024, the "MB" of Kafka's perf tools.
pub const MB: f64 = 1024.0 * 1024.0;

/// Sub-bucket bits of [`Histogram`]: 2^9 sub-buckets per power of two.
const SUB_BITS: u32 = 9;
const SUB: u64 = 1 << SUB_BITS;

/// A log-linear histogram of latencies in microseconds: exact below
/// 1024 µs, then 512 linear sub-buckets per power of two (relative error
/// below 0.2 %). Memory grows with the largest value (about 4 KiB per
/// power of two). `min`, `max`, `sum` and `count` are exact.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum_us: u128,
    min_us: u64,
    max_us: u64,
}

fn bucket_index(v: u64) -> usize {
    if v < 2 * SUB {
        v as usize
    } else {
        let exp = 63 - v.leading_zeros();
        let shift = exp - SUB_BITS;
        let sub = (v >> shift) - SUB;
        (2 * SUB + u64::from(shift - 1) * SUB + sub) as usize
    }
}

/// The lowest value and the width of bucket `i`.
fn bucket_range(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < 2 * SUB {
        (i, 1)
    } else {
        let j = i - 2 * SUB;
        let shift = j / SUB + 1;
        ((SUB + j % SUB) << shift, 1 << shift)
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        self.record_us(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
    }

    /// Records one latency in microseconds.
    pub fn record_us(&mut self, us: u64) {
        let i = bucket_index(us);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        if self.count == 0 || us < self.min_us {
            self.min_us = us;
        }
        self.max_us = self.max_us.max(us);
        self.count += 1;
        self.sum_us += u128::from(us);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        if other.count == 0 {
            return;
        }
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        if self.count == 0 || other.min_us < self.min_us {
            self.min_us = other.min_us;
        }
        self.max_us = self.max_us.max(other.max_us);
        self.count += other.count;
        self.sum_us += other.sum_us;
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Mean in microseconds (0 when empty).
    pub fn mean_us(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_us as f64 / self.count as f64
        }
    }

    /// Largest value in microseconds (0 when empty).
    pub fn max_us(&self) -> u64 {
        self.max_us
    }

    /// Smallest value in microseconds (0 when empty).
    #[allow(dead_code)]
    pub fn min_us(&self) -> u64 {
        self.min_us
    }

    /// The value at quantile `q` (0.0..=1.0) in microseconds: the middle
    /// of the bucket holding the value of rank `ceil(q * count)`, clamped to
    /// `[min, max]` (so percentiles never exceed the maximum and grow with
    /// `q`). 0 when empty.
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, width) = bucket_range(i);
                return (low + (width - 1) / 2).clamp(self.min_us, self.max_us);
            }
        }
        self.max_us
    }

    /// avg, p50, p95, p99, p99.9 and max in milliseconds.
    pub fn summary(&self) -> LatencySummary {
        let ms = |us: u64| us as f64 / 1000.0;
        LatencySummary {
            avg_ms: self.mean_us() / 1000.0,
            p50_ms: ms(self.quantile_us(0.5)),
            p95_ms: ms(self.quantile_us(0.95)),
            p99_ms: ms(self.quantile_us(0.99)),
            p999_ms: ms(self.quantile_us(0.999)),
            max_ms: ms(self.max_us()),
        }
    }
}

/// Latency statistics in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencySummary {
    /// Mean.
    pub avg_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

impl LatencySummary {
    /// `{"avg": .., "p50": .., "p95": .., "p99": .., "p999": .., "max": ..}`.
    pub fn to_json(self) -> Json {
        Json::object([
            ("avg", Json::Num(self.avg_ms)),
            ("p50", Json::Num(self.p50_ms)),
            ("p95", Json::Num(self.p95_ms)),
            ("p99", Json::Num(self.p99_ms)),
            ("p999", Json::Num(self.p999_ms)),
            ("max", Json::Num(self.max_ms)),
        ])
    }
}

/// A tiny JSON value for the `--json` outputs (numbers print with at most
/// three decimals; non-finite numbers print as `null`).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// An unsigned integer.
    Int(u64),
    /// A float.
    Num(f64),
    /// A string (for `perf consume`'s start/end times).
    Str(String),
    /// An object, keys in order.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// An object from `(key, value)` pairs.
    pub fn object<'a>(fields: impl IntoIterator<Item = (&'a str, Json)>) -> Json {
        Json::Obj(
            fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    }

    /// Appends a field to an object (no-op on other values).
    pub fn push(&mut self, key: &str, value: Json) {
        if let Json::Obj(fields) = self {
            fields.push((key.to_string(), value));
        }
    }
}

fn write_json_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if u32::from(c) < 0x20 => write!(f, "\\u{:04x}", u32::from(c))?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Int(n) => write!(f, "{n}"),
            Json::Num(x) if !x.is_finite() => f.write_str("null"),
            Json::Num(x) => {
                let s = format!("{x:.3}");
                let s = s.trim_end_matches('0').trim_end_matches('.');
                f.write_str(if s.is_empty() || s == "-" || s == "-0" {
                    "0"
                } else {
                    s
                })
            }
            Json::Str(s) => write_json_str(f, s),
            Json::Obj(fields) => {
                f.write_char('{')?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write_json_str(f, k)?;
                    write!(f, ":{v}")?;
                }
                f.write_char('}')
            }
        }
    }
}

/// The final numbers of a perf run.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Records completed (acknowledged, or consumed).
    pub records: u64,
    /// Payload bytes of those records.
    pub bytes: u64,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// Per-record latency, when the tool measures it.
    pub latency: Option<LatencySummary>,
}

impl Summary {
    /// Records per second.
    pub fn records_per_sec(&self) -> f64 {
        per_sec(self.records as f64, self.elapsed)
    }

    /// MB (2^20 bytes) per second.
    pub fn mb_per_sec(&self) -> f64 {
        per_sec(self.bytes as f64 / MB, self.elapsed)
    }

    /// records, bytes, elapsed_s, records_per_sec, mb_per_sec and (when
    /// measured) latency_ms; callers may [`Json::push`] more fields.
    pub fn to_json(&self) -> Json {
        let mut j = Json::object([
            ("records", Json::Int(self.records)),
            ("bytes", Json::Int(self.bytes)),
            ("elapsed_s", Json::Num(self.elapsed.as_secs_f64())),
            ("records_per_sec", Json::Num(self.records_per_sec())),
            ("mb_per_sec", Json::Num(self.mb_per_sec())),
        ]);
        if let Some(l) = &self.latency {
            j.push("latency_ms", l.to_json());
        }
        j
    }

    /// Kafka's final producer line: `N records sent, R records/sec (M
    /// MB/sec), A ms avg latency, X ms max latency, P ms 50th, P ms 95th, P
    /// ms 99th, P ms 99.9th.` (percentiles in whole milliseconds).
    pub fn produce_line(&self) -> String {
        self.latency_line("sent", 1, 0)
    }

    /// The final `perf e2e` line: like [`Self::produce_line`] with
    /// "received" and percentiles to 0.01 ms (end-to-end latencies are
    /// often around a millisecond).
    pub fn e2e_line(&self) -> String {
        self.latency_line("received", 2, 2)
    }

    /// The shared layout of both lines: avg and max with `decimals`,
    /// percentiles with `pct_decimals`.
    fn latency_line(&self, verb: &str, decimals: usize, pct_decimals: usize) -> String {
        let l = self.latency.unwrap_or_default();
        let (d, p) = (decimals, pct_decimals);
        format!(
            "{} records {verb}, {:.1} records/sec ({:.2} MB/sec), {:.d$} ms avg latency, \
             {:.d$} ms max latency, {:.p$} ms 50th, {:.p$} ms 95th, {:.p$} ms 99th, \
             {:.p$} ms 99.9th.",
            self.records,
            self.records_per_sec(),
            self.mb_per_sec(),
            l.avg_ms,
            l.max_ms,
            l.p50_ms,
            l.p95_ms,
            l.p99_ms,
            l.p999_ms
        )
    }
}

/// `amount / elapsed` in seconds (0 for an empty interval).
pub fn per_sec(amount: f64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 {
        amount / s
    } else {
        0.0
    }
}

/// Running totals shared by the worker tasks and the [`Reporter`]: all
/// lock-free, so producers can record every completion.
#[derive(Debug, Default)]
pub struct Counters {
    records: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    window_records: AtomicU64,
    window_bytes: AtomicU64,
    window_latency_sum_us: AtomicU64,
    window_latency_max_us: AtomicU64,
}

/// What happened since the previous window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Records completed in the window.
    pub records: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Window length.
    pub elapsed: Duration,
    /// Mean latency in ms (0 without latencies).
    pub avg_latency_ms: f64,
    /// Largest latency in ms.
    pub max_latency_ms: f64,
}

impl Window {
    /// Kafka's periodic producer line: `N records sent, R records/sec (M
    /// MB/sec), A ms avg latency, X ms max latency.`
    pub fn produce_line(&self) -> String {
        format!(
            "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.1} ms avg latency, {:.1} ms max latency.",
            self.records,
            per_sec(self.records as f64, self.elapsed),
            per_sec(self.bytes as f64 / MB, self.elapsed),
            self.avg_latency_ms,
            self.max_latency_ms
        )
    }

    /// The periodic `perf e2e` line: `N records received, R records/sec (M
    /// MB/sec), A ms avg latency, X ms max latency.`
    pub fn e2e_line(&self) -> String {
        format!(
            "{} records received, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency.",
            self.records,
            per_sec(self.records as f64, self.elapsed),
            per_sec(self.bytes as f64 / MB, self.elapsed),
            self.avg_latency_ms,
            self.max_latency_ms
        )
    }
}

impl Counters {
    /// A completed record of `bytes` bytes with its latency (if measured).
    pub fn record(&self, bytes: u64, latency: Option<Duration>) {
        self.records.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.window_records.fetch_add(1, Ordering::Relaxed);
        self.window_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Some(l) = latency {
            let us = u64::try_from(l.as_micros()).unwrap_or(u64::MAX);
            self.window_latency_sum_us.fetch_add(us, Ordering::Relaxed);
            self.window_latency_max_us.fetch_max(us, Ordering::Relaxed);
        }
    }

    /// `records` completed records of `bytes` bytes in all, without
    /// latencies (one update per poll for consumers).
    pub fn record_batch(&self, records: u64, bytes: u64) {
        self.records.fetch_add(records, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.window_records.fetch_add(records, Ordering::Relaxed);
        self.window_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A failed record (counts towards progress, not throughput).
    pub fn record_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Records completed so far.
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Payload bytes completed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Failed records so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Returns and resets the current window (`elapsed` is its length).
    pub fn take_window(&self, elapsed: Duration) -> Window {
        let records = self.window_records.swap(0, Ordering::Relaxed);
        let bytes = self.window_bytes.swap(0, Ordering::Relaxed);
        let sum = self.window_latency_sum_us.swap(0, Ordering::Relaxed);
        let max = self.window_latency_max_us.swap(0, Ordering::Relaxed);
        Window {
            records,
            bytes,
            elapsed,
            avg_latency_ms: if records == 0 {
                0.0
            } else {
                sum as f64 / records as f64 / 1000.0
            },
            max_latency_ms: max as f64 / 1000.0,
        }
    }
}

/// How often [`Reporter`] prints a window line (Kafka's 5 s).
pub const WINDOW_INTERVAL: Duration = Duration::from_secs(5);

/// Formats a [`Window`] for the periodic lines.
pub type WindowFormat = fn(&Window) -> String;

/// A background task that prints a window line on stdout every
/// [`WINDOW_INTERVAL`] (when given a format) and draws a progress bar on
/// stderr (only when stderr is a terminal).
#[derive(Debug)]
pub struct Reporter {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Reporter {
    /// Starts reporting on `counters`; `total` is the number of records the
    /// run expects (for the progress bar).
    pub fn start(counters: Arc<Counters>, total: u64, window: Option<WindowFormat>) -> Self {
        let progress = std::io::stderr().is_terminal();
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut window_start = Instant::now();
            let mut bar_shown = false;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
                if let Some(format) = window {
                    let elapsed = window_start.elapsed();
                    if elapsed >= WINDOW_INTERVAL {
                        window_start = Instant::now();
                        let line = format(&counters.take_window(elapsed));
                        if bar_shown {
                            clear_progress();
                            bar_shown = false;
                        }
                        println!("{line}");
                    }
                }
                if progress {
                    draw_progress(counters.records() + counters.errors(), total);
                    bar_shown = true;
                }
            }
            if bar_shown {
                clear_progress();
            }
        });
        Self { stop, task }
    }

    /// Stops the task (clearing the progress bar).
    pub async fn finish(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The progress bar text: `[=====>    ] done/total records (pct%)`.
pub fn progress_text(done: u64, total: u64) -> String {
    const WIDTH: u64 = 30;
    let total = total.max(1);
    let done = done.min(total);
    let filled = done * WIDTH / total;
    let mut bar = "=".repeat(filled as usize);
    if filled < WIDTH {
        bar.push('>');
        bar.push_str(&" ".repeat((WIDTH - filled - 1) as usize));
    }
    format!("[{bar}] {done}/{total} records ({}%)", done * 100 / total)
}

fn draw_progress(done: u64, total: u64) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K{}", progress_text(done, total));
    let _ = err.flush();
}

fn clear_progress() {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
}

/// A records/s cap in the spirit of Kafka's `ThroughputThrottler`: before
/// each record, sleep until the time the record is due at the target rate
/// (sleeps shorter than 2 ms are deferred and accumulate, as in Kafka).
#[derive(Debug, Clone)]
pub struct Throttle {
    start: Instant,
    /// Records per second; `None` means unlimited.
    rate: Option<f64>,
}

impl Throttle {
    /// A throttle starting now; a rate `<= 0` (Kafka's -1) means no limit.
    pub fn new(rate: f64) -> Self {
        Self {
            start: Instant::now(),
            rate: (rate > 0.0 && rate.is_finite()).then_some(rate),
        }
    }

    /// How long to wait before sending record number `sent` (0-based), or
    /// `None` to go ahead.
    pub fn delay(&self, sent: u64, now: Instant) -> Option<Duration> {
        let rate = self.rate?;
        let due = self.start + Duration::from_secs_f64(sent as f64 / rate);
        let wait = due.checked_duration_since(now)?;
        (wait >= Duration::from_millis(2)).then_some(wait)
    }

    /// Waits until record number `sent` may go.
    pub async fn wait(&self, sent: u64) {
        if self.rate.is_none() {
            return; // no clock read per record without a limit
        }
        if let Some(d) = self.delay(sent, Instant::now()) {
            tokio::time::sleep(d).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut prev = (0, 1);
        for i in 1..(2 * SUB as usize + 40 * SUB as usize) {
            let (low, width) = bucket_range(i);
            assert_eq!(low, prev.0 + prev.1, "bucket {i}");
            assert_eq!(bucket_index(low), i);
            assert_eq!(bucket_index(low + width - 1), i);
            assert!(width == 1 || (width as f64) / (low as f64) <= 1.0 / SUB as f64);
            prev = (low, width);
        }
        assert_eq!(bucket_index(u64::MAX), bucket_index(u64::MAX - 1));
    }

    #[test]
    fn quantiles_are_close_and_ordered() {
        let mut h = Histogram::new();
        for v in 1..=100_000u64 {
            h.record_us(v);
        }
        assert_eq!(h.count(), 100_000);
        assert_eq!(h.max_us(), 100_000);
        assert_eq!(h.min_us(), 1);
        assert!((h.mean_us() - 50_000.5).abs() < 1e-6);
        for (q, want) in [(0.5, 50_000.0), (0.95, 95_000.0), (0.99, 99_000.0)] {
            let got = h.quantile_us(q) as f64;
            assert!((got - want).abs() / want < 0.003, "q{q}: {got}");
        }
        let s = h.summary();
        assert!(s.p50_ms <= s.p95_ms && s.p95_ms <= s.p99_ms);
        assert!(s.p99_ms <= s.p999_ms && s.p999_ms <= s.max_ms);
        assert_eq!(s.max_ms, 100.0);
        assert_eq!(h.quantile_us(1.0), 100_000);
        assert_eq!(Histogram::new().quantile_us(0.5), 0);
    }

    #[test]
    fn merge_adds_everything() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(Duration::from_millis(3));
        b.record(Duration::from_micros(10));
        b.record(Duration::from_secs(2));
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.min_us(), 10);
        assert_eq!(a.max_us(), 2_000_000);
        a.merge(&Histogram::new());
        assert_eq!(a.count(), 3);
    }

    #[test]
    fn json_output() {
        let s = Summary {
            records: 10,
            bytes: 2 * 1024 * 1024,
            elapsed: Duration::from_secs(2),
            latency: Some(LatencySummary {
                avg_ms: 1.5,
                p50_ms: 1.0,
                p95_ms: 2.0,
                p99_ms: 3.0,
                p999_ms: 4.25,
                max_ms: 5.0,
            }),
        };
        assert_eq!(
            s.to_json().to_string(),
            "{\"records\":10,\"bytes\":2097152,\"elapsed_s\":2,\"records_per_sec\":5,\
             \"mb_per_sec\":1,\"latency_ms\":{\"avg\":1.5,\"p50\":1,\"p95\":2,\"p99\":3,\
             \"p999\":4.25,\"max\":5}}"
        );
        assert_eq!(
            s.produce_line(),
            "10 records sent, 5.0 records/sec (1.00 MB/sec), 1.5 ms avg latency, 5.0 ms max \
             latency, 1 ms 50th, 2 ms 95th, 3 ms 99th, 4 ms 99.9th."
        );
        let mut j = Json::object([("s", Json::Str("a\"b\n".into()))]);
        j.push("x", Json::Num(f64::NAN));
        j.push("y", Json::Num(-0.0001));
        assert_eq!(j.to_string(), "{\"s\":\"a\\\"b\\n\",\"x\":null,\"y\":0}");
    }

    #[test]
    fn e2e_lines_and_batches() {
        let s = Summary {
            records: 4,
            bytes: 400,
            elapsed: Duration::from_secs(2),
            latency: Some(LatencySummary {
                avg_ms: 1.234,
                p50_ms: 1.0,
                p95_ms: 2.0,
                p99_ms: 3.0,
                p999_ms: 4.25,
                max_ms: 5.0,
            }),
        };
        assert_eq!(
            s.e2e_line(),
            "4 records received, 2.0 records/sec (0.00 MB/sec), 1.23 ms avg latency, 5.00 ms \
             max latency, 1.00 ms 50th, 2.00 ms 95th, 3.00 ms 99th, 4.25 ms 99.9th."
        );
        let c = Counters::default();
        c.record_batch(3, 300);
        c.record(100, Some(Duration::from_millis(2)));
        assert_eq!((c.records(), c.bytes()), (4, 400));
        let w = c.take_window(Duration::from_secs(1));
        assert_eq!(
            w.e2e_line(),
            "4 records received, 4.0 records/sec (0.00 MB/sec), 0.50 ms avg latency, 2.00 ms \
             max latency."
        );
    }

    #[test]
    fn windows_reset() {
        let c = Counters::default();
        c.record(100, Some(Duration::from_millis(2)));
        c.record(100, Some(Duration::from_millis(4)));
        let w = c.take_window(Duration::from_secs(1));
        assert_eq!(w.records, 2);
        assert_eq!(w.bytes, 200);
        assert!((w.avg_latency_ms - 3.0).abs() < 1e-9);
        assert!((w.max_latency_ms - 4.0).abs() < 1e-9);
        assert!(w
            .produce_line()
            .starts_with("2 records sent, 2.0 records/sec"));
        assert_eq!(c.take_window(Duration::from_secs(1)).records, 0);
        assert_eq!(c.records(), 2);
        assert_eq!(c.bytes(), 200);
    }

    #[test]
    fn progress_bar_text() {
        assert_eq!(
            progress_text(0, 10),
            format!("[>{}] 0/10 records (0%)", " ".repeat(29))
        );
        assert_eq!(
            progress_text(10, 10),
            format!("[{}] 10/10 records (100%)", "=".repeat(30))
        );
        assert!(progress_text(5, 10).contains("(50%)"));
    }

    #[test]
    fn throttle_schedule() {
        let t = Throttle::new(1000.0);
        let now = t.start;
        assert_eq!(t.delay(0, now), None);
        assert_eq!(t.delay(1, now), None, "1 ms is below the 2 ms minimum");
        assert_eq!(t.delay(500, now), Some(Duration::from_millis(500)));
        assert_eq!(t.delay(500, now + Duration::from_secs(1)), None);
        assert_eq!(Throttle::new(-1.0).delay(1_000_000, now), None);
    }
}
