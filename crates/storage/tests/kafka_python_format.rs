//! Format compatibility with an independent implementation of Kafka's v2
//! record batch: kafka-python's `kafka.record` (driven by
//! `tests/compat/kafka_records.py`).
//!
//! What this proves:
//! - A segment `.log` file written by Sluice (`<topic>-<partition>/
//!   00000000000000000000.log`) is a valid Kafka log to kafka-python: every
//!   batch's CRC32C checks, every codec (none, gzip, snappy, lz4, zstd)
//!   decompresses, and each record's offset, timestamp, key, value and
//!   headers (null and empty included) are what Sluice was given; base
//!   offsets, leader epochs, producer fields and batch sizes agree. The same
//!   holds for a LogAppendTime partition, whose batches Sluice re-stamps
//!   (timestamp type, max timestamp, recomputed CRC).
//! - Batches built by kafka-python's producer-side builder in every codec are
//!   accepted by `Log::append_as_leader` (CRC and header checks), stored
//!   byte for byte except the base offset and leader epoch Sluice assigns (and
//!   under LogAppendTime the timestamp fields and CRC), read back, decoded by
//!   Sluice's own codec to the records kafka-python put in, and decoded again
//!   by kafka-python from Sluice's segment file.
//!
//! The Python interpreter is `$SLUICETEST_PYTHON` (set by `scripts/test.sh`,
//! which installs `tests/requirements.txt` into `target/test-venv`), else
//! `python3`. Without kafka-python and its codec libraries the tests fail
//! rather than skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use sluice_protocol::record::codec::{decode_batch, ProducerInfo};
use sluice_protocol::record::{BatchBuilder, BatchHeader, BatchIter, Compression, Header, Record};
use sluice_storage::{
    Log, LogConfig, LogOpenOptions, ManualClock, ReadLimit, TimestampType, TopicPartition,
};

const T0: i64 = 1_700_000_000_000;
const EPOCH: i32 = 7;
const TOPIC: &str = "compat";

// ------------------------------------------------------------------ JSON

/// Just enough JSON for the helper's output (integers, no floats).
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

struct JsonParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl JsonParser<'_> {
    fn parse(text: &str) -> Json {
        let mut p = JsonParser {
            s: text.as_bytes(),
            pos: 0,
        };
        let v = p.value();
        p.ws();
        assert_eq!(p.pos, p.s.len(), "trailing bytes after the JSON document");
        v
    }

    fn ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> u8 {
        self.ws();
        *self
            .s
            .get(self.pos)
            .unwrap_or_else(|| panic!("JSON ends early at byte {}", self.pos))
    }

    fn expect(&mut self, c: u8) {
        let got = self.peek();
        assert_eq!(
            got as char, c as char,
            "JSON: unexpected byte at {}",
            self.pos
        );
        self.pos += 1;
    }

    fn literal(&mut self, word: &str, v: Json) -> Json {
        assert!(
            self.s[self.pos..].starts_with(word.as_bytes()),
            "JSON: bad literal at {}",
            self.pos
        );
        self.pos += word.len();
        v
    }

    fn value(&mut self) -> Json {
        match self.peek() {
            b'n' => self.literal("null", Json::Null),
            b't' => self.literal("true", Json::Bool(true)),
            b'f' => self.literal("false", Json::Bool(false)),
            b'"' => Json::Str(self.string()),
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                if self.peek() == b']' {
                    self.pos += 1;
                    return Json::Arr(items);
                }
                loop {
                    items.push(self.value());
                    match self.peek() {
                        b',' => self.pos += 1,
                        _ => {
                            self.expect(b']');
                            return Json::Arr(items);
                        }
                    }
                }
            }
            b'{' => {
                self.pos += 1;
                let mut fields = Vec::new();
                if self.peek() == b'}' {
                    self.pos += 1;
                    return Json::Obj(fields);
                }
                loop {
                    self.peek();
                    let k = self.string();
                    self.expect(b':');
                    fields.push((k, self.value()));
                    match self.peek() {
                        b',' => self.pos += 1,
                        _ => {
                            self.expect(b'}');
                            return Json::Obj(fields);
                        }
                    }
                }
            }
            _ => {
                let start = self.pos;
                if self.s[self.pos] == b'-' {
                    self.pos += 1;
                }
                while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
                    self.pos += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.pos]).expect("ascii");
                Json::Int(
                    text.parse()
                        .unwrap_or_else(|e| panic!("JSON: bad number {text:?} at {start}: {e}")),
                )
            }
        }
    }

    fn string(&mut self) -> String {
        self.expect(b'"');
        let mut out = Vec::new();
        loop {
            let c = self.s[self.pos];
            self.pos += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = self.s[self.pos];
                    self.pos += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'u' => {
                            let hex = std::str::from_utf8(&self.s[self.pos..self.pos + 4])
                                .expect("ascii");
                            self.pos += 4;
                            let cp = u32::from_str_radix(hex, 16).expect("\\u escape");
                            let ch = char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER);
                            out.extend_from_slice(ch.to_string().as_bytes());
                        }
                        other => panic!("JSON: bad escape \\{}", other as char),
                    }
                }
                c => out.push(c),
            }
        }
        String::from_utf8(out).expect("JSON string is UTF-8")
    }
}

impl Json {
    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(fields) => fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("JSON object has no {key:?}: {self:?}")),
            other => panic!("not a JSON object: {other:?}"),
        }
    }

    fn int(&self, key: &str) -> i64 {
        match self.get(key) {
            Json::Int(n) => *n,
            other => panic!("{key}: not an integer: {other:?}"),
        }
    }

    fn str(&self, key: &str) -> &str {
        match self.get(key) {
            Json::Str(s) => s,
            other => panic!("{key}: not a string: {other:?}"),
        }
    }

    fn bool(&self, key: &str) -> bool {
        match self.get(key) {
            Json::Bool(b) => *b,
            other => panic!("{key}: not a boolean: {other:?}"),
        }
    }

    fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(items) => items,
            other => panic!("not a JSON array: {other:?}"),
        }
    }

    /// Hex string or null.
    fn bytes(&self) -> Option<Vec<u8>> {
        match self {
            Json::Null => None,
            Json::Str(s) => Some(unhex(s)),
            other => panic!("expected hex or null: {other:?}"),
        }
    }
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd-length hex {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

// ------------------------------------------------- what kafka-python saw

/// One batch as kafka-python reports it.
#[derive(Debug, Clone, PartialEq)]
struct PyBatch {
    base_offset: i64,
    last_offset: i64,
    records_count: i64,
    leader_epoch: i64,
    crc_valid: bool,
    compression: String,
    timestamp_type: i64,
    first_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i64,
    base_sequence: i64,
    size: i64,
    records: Vec<Record>,
}

impl PyBatch {
    fn from_json(b: &Json) -> Self {
        let records = b
            .get("records")
            .arr()
            .iter()
            .map(|r| Record {
                offset: r.int("offset"),
                timestamp: r.int("timestamp"),
                key: r.get("key").bytes(),
                value: r.get("value").bytes(),
                headers: r
                    .get("headers")
                    .arr()
                    .iter()
                    .map(|h| match h.arr() {
                        [k, v] => Header {
                            key: k.bytes().expect("header key is never null"),
                            value: v.bytes(),
                        },
                        other => panic!("header is not a pair: {other:?}"),
                    })
                    .collect(),
            })
            .collect();
        Self {
            base_offset: b.int("base_offset"),
            last_offset: b.int("last_offset"),
            records_count: b.int("records_count"),
            leader_epoch: b.int("leader_epoch"),
            crc_valid: b.bool("crc_valid"),
            compression: b.str("compression").to_string(),
            timestamp_type: b.int("timestamp_type"),
            first_timestamp: b.int("first_timestamp"),
            max_timestamp: b.int("max_timestamp"),
            producer_id: b.int("producer_id"),
            producer_epoch: b.int("producer_epoch"),
            base_sequence: b.int("base_sequence"),
            size: b.int("size"),
            records,
        }
    }

    /// The same batch described from Sluice's side: its header (as stored)
    /// and its decoded records.
    fn from_sluice(h: &BatchHeader, records: Vec<Record>) -> Self {
        Self {
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
            records_count: i64::from(h.records_count),
            leader_epoch: i64::from(h.partition_leader_epoch),
            crc_valid: true,
            compression: h.compression().expect("known codec").name().to_string(),
            timestamp_type: match h.timestamp_type() {
                sluice_protocol::record::TimestampType::CreateTime => 0,
                sluice_protocol::record::TimestampType::LogAppendTime => 1,
            },
            first_timestamp: h.base_timestamp,
            max_timestamp: h.max_timestamp,
            producer_id: h.producer_id,
            producer_epoch: i64::from(h.producer_epoch),
            base_sequence: i64::from(h.base_sequence),
            size: h.total_size() as i64,
            records,
        }
    }
}

/// The helper's output: kafka-python's version and its batches.
struct PyReport {
    version: String,
    file_size: Option<i64>,
    batches: Vec<PyBatch>,
}

fn python() -> String {
    std::env::var("SLUICETEST_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/compat/kafka_records.py")
}

/// Runs `kafka_records.py <command> <file>` and parses its report. Any
/// failure, including a Python without kafka-python, fails the test.
fn run_helper(command: &str, file: &Path) -> PyReport {
    const HINT: &str = "this test needs kafka-python and its codec libraries: run \
                        scripts/test.sh (it installs tests/requirements.txt into \
                        target/test-venv and sets SLUICETEST_PYTHON to that interpreter)";
    let py = python();
    let out = Command::new(&py)
        .arg(script())
        .arg(command)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the Python interpreter {py:?}: {e}; {HINT}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        panic!("{py} lacks kafka-python or a codec library:\n{stderr}\n{HINT}");
    }
    assert!(
        out.status.success(),
        "kafka_records.py {command} {} failed ({}) with {py}:\n{stderr}",
        file.display(),
        out.status
    );
    let stdout = String::from_utf8(out.stdout).expect("helper output is UTF-8");
    let doc = JsonParser::parse(&stdout);
    PyReport {
        version: doc.str("kafka_python").to_string(),
        file_size: match doc {
            Json::Obj(ref f) if f.iter().any(|(k, _)| k == "file_size") => {
                Some(doc.int("file_size"))
            }
            _ => None,
        },
        batches: doc
            .get("batches")
            .arr()
            .iter()
            .map(PyBatch::from_json)
            .collect(),
    }
}

// ------------------------------------------------------------ Sluice side

fn open_log(
    data_dir: &Path,
    partition: i32,
    ts_type: TimestampType,
    clock: &Arc<ManualClock>,
) -> Log {
    let tp = TopicPartition::new(TOPIC, partition);
    let config = LogConfig {
        message_timestamp_type: ts_type,
        ..LogConfig::default()
    };
    Log::open(
        &data_dir.join(tp.dir_name()),
        tp,
        config,
        LogOpenOptions::default(),
        clock.clone(),
    )
    .expect("open log")
}

/// The first (and here only) segment file of a partition, in Kafka's layout.
fn segment_file(log: &Log) -> PathBuf {
    let dir = log.dir();
    assert_eq!(
        dir.file_name().and_then(|n| n.to_str()),
        Some(format!("{TOPIC}-{}", log.topic_partition().partition).as_str())
    );
    assert_eq!(log.segment_base_offsets(), vec![0], "one segment");
    for ext in ["index", "timeindex"] {
        let p = dir.join(format!("00000000000000000000.{ext}"));
        assert!(p.is_file(), "{} missing", p.display());
    }
    let p = dir.join("00000000000000000000.log");
    assert!(p.is_file(), "{} missing", p.display());
    p
}

/// Every batch of the log, as stored, read through `Log::read`.
fn read_all_batches(log: &Log) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let info = log
            .read(next, 64 * 1024, ReadLimit::LogEnd, true)
            .expect("read");
        let bytes = info
            .region
            .expect("data below the log end")
            .read_to_vec()
            .expect("region bytes");
        let mut progressed = false;
        for b in BatchIter::new(&bytes) {
            let (_, h, raw) = b.expect("stored batch parses");
            assert!(
                h.base_offset >= next,
                "reads start at a batch boundary here"
            );
            out.push(raw.to_vec());
            next = h.last_offset() + 1;
            progressed = true;
        }
        assert!(progressed, "read at {next} returned no whole batch");
    }
    out
}

fn decode_records(raw: &[u8]) -> (BatchHeader, Vec<Record>) {
    let d = decode_batch(raw, 16 << 20).expect("Sluice decodes the stored batch");
    (d.header, d.records.into_iter().map(|r| r.record).collect())
}

/// Short form of a possibly long byte string for failure messages.
fn brief(b: Option<&[u8]>) -> String {
    match b {
        None => "null".to_string(),
        Some(b) if b.len() <= 24 => format!("{b:02x?}"),
        Some(b) => format!("{} bytes {:02x?}..", b.len(), &b[..24]),
    }
}

/// What differs between two records, field by field.
fn record_diff(got: &Record, want: &Record) -> Vec<String> {
    let mut out = Vec::new();
    if got.offset != want.offset {
        out.push(format!("offset {} != {}", got.offset, want.offset));
    }
    if got.timestamp != want.timestamp {
        out.push(format!("timestamp {} != {}", got.timestamp, want.timestamp));
    }
    if got.key != want.key {
        out.push(format!(
            "key {} != {}",
            brief(got.key.as_deref()),
            brief(want.key.as_deref())
        ));
    }
    if got.value != want.value {
        out.push(format!(
            "value {} != {}",
            brief(got.value.as_deref()),
            brief(want.value.as_deref())
        ));
    }
    if got.headers != want.headers {
        let show = |hs: &[Header]| {
            hs.iter()
                .map(|h| format!("{}={}", brief(Some(&h.key)), brief(h.value.as_deref())))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push(format!(
            "headers [{}] != [{}]",
            show(&got.headers),
            show(&want.headers)
        ));
    }
    out
}

/// Checks one batch against the expected one: header fields, then each
/// record (with short failure messages: values run to tens of KiB).
fn assert_same_batch(what: &str, got: &PyBatch, want: &PyBatch) {
    assert!(got.crc_valid, "{what}: fails kafka-python's CRC check");
    let header = |b: &PyBatch| PyBatch {
        records: Vec::new(),
        ..b.clone()
    };
    assert_eq!(header(got), header(want), "{what}: batch header");
    assert_eq!(
        got.records.len(),
        want.records.len(),
        "{what}: record count"
    );
    for (j, (g, w)) in got.records.iter().zip(&want.records).enumerate() {
        let diff = record_diff(g, w);
        assert!(
            diff.is_empty(),
            "{what} ({}): record {j} differs (got != want): {}",
            want.compression,
            diff.join("; ")
        );
    }
}

/// Compares kafka-python's view of a file with the expected batches.
fn assert_same_batches(what: &str, got: &[PyBatch], want: &[PyBatch]) {
    assert_eq!(got.len(), want.len(), "{what}: batch count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_same_batch(&format!("{what}: batch {i}"), g, w);
    }
}

// ------------------------------------------------- (a) Sluice -> kafka-python

const TEXT: &[u8] = b"the quick brown fox jumps over the lazy dog; ";

fn binary() -> Vec<u8> {
    (0..=255u8).collect()
}

/// Batches of one codec: mixed records (null and empty keys, values and
/// header values, UTF-8 header keys, timestamps before the base timestamp),
/// a single record, and a large batch spanning several codec blocks.
fn sluice_batches(c: Compression) -> Vec<BatchBuilder> {
    let name = c.name().as_bytes();
    let mut mixed = BatchBuilder::new(c, T0 + 10);
    mixed.push(Record::new(
        Some(b"key-0".to_vec()),
        Some(TEXT.repeat(4)),
        T0 + 10,
    ));
    mixed.push(
        Record::new(None, Some([TEXT.repeat(3), name.to_vec()].concat()), T0 + 5)
            .with_header(b"h1", Some(b"v1"))
            .with_header(b"h-null", None),
    );
    mixed.push(Record::new(Some(Vec::new()), None, T0 + 20).with_header(b"", Some(b"")));
    mixed.push(Record::new(None, None, T0 + 20));
    mixed.push(
        Record::new(
            Some([b"k\x00\xff".as_slice(), name].concat()),
            Some([binary(), TEXT.repeat(2)].concat()),
            T0 - 50,
        )
        .with_header("été".as_bytes(), Some(&binary()))
        .with_header("ключ".as_bytes(), Some(TEXT)),
    );
    mixed.push(
        Record::new(Some(b"key-5".to_vec()), Some(Vec::new()), T0 + 7)
            .with_header(b"dup", Some(b"a"))
            .with_header(b"dup", Some(b"b")),
    );

    let mut solo = BatchBuilder::new(c, T0 + 100);
    solo.push(Record::new(None, Some(TEXT.repeat(5)), T0 + 100).with_header(b"only", None));

    let producer = ProducerInfo {
        producer_id: 9000 + i64::from(c.id()),
        producer_epoch: 2,
        base_sequence: 40 * i32::from(c.id()),
    };
    let mut big = BatchBuilder::new(c, T0 + 200).producer(producer, false);
    let long = TEXT.repeat(600);
    for i in 0..8usize {
        let mut value = long[..20_000 + i * 997].to_vec();
        for _ in 0..i % 3 {
            value.extend_from_slice(&binary());
        }
        big.push(
            Record::new(
                Some(format!("big-{i}").into_bytes()),
                Some(value),
                T0 + 200 + i as i64,
            )
            .with_header(b"i", Some(i.to_string().as_bytes())),
        );
    }
    vec![mixed, solo, big]
}

/// Appends `requests` (each one produce request of one or more batches) and
/// returns the batches as stored: header plus records with their offsets.
fn append_requests(log: &Log, requests: Vec<Vec<Vec<u8>>>, clock: &ManualClock) -> Vec<PyBatch> {
    let mut want = Vec::new();
    for (n, request) in requests.into_iter().enumerate() {
        clock.set(T0 + 1_000 * n as i64);
        let mut bytes = request.concat();
        let info = log
            .append_as_leader(&mut bytes, EPOCH)
            .expect("append_as_leader");
        assert_eq!(info.batches.len(), request.len());
        // `bytes` now holds exactly what was written to the segment.
        for b in BatchIter::new(&bytes) {
            let (_, h, raw) = b.expect("appended batch");
            let (dh, records) = decode_records(raw);
            assert_eq!(dh, h);
            want.push(PyBatch::from_sluice(&h, records));
        }
    }
    want
}

#[test]
fn kafka_python_reads_sluice_segments() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));

    for ts_type in [TimestampType::CreateTime, TimestampType::LogAppendTime] {
        let partition = match ts_type {
            TimestampType::CreateTime => 0,
            TimestampType::LogAppendTime => 1,
        };
        let log = open_log(tmp.path(), partition, ts_type, &clock);
        // Each batch on its own, and then one request holding a batch of
        // every codec.
        let mut requests: Vec<Vec<Vec<u8>>> = Vec::new();
        for c in Compression::ALL {
            for b in sluice_batches(c) {
                requests.push(vec![b.build(0).expect("build")]);
            }
        }
        requests.push(
            Compression::ALL
                .iter()
                .map(|&c| {
                    let mut b = BatchBuilder::new(c, T0 + 300);
                    b.push(Record::new(
                        Some(c.name().as_bytes().to_vec()),
                        Some(TEXT.repeat(3)),
                        T0 + 301,
                    ));
                    b.push(Record::new(None, None, T0 + 299).with_header(b"x", None));
                    b.build(0).expect("build")
                })
                .collect(),
        );
        let want = append_requests(&log, requests, &clock);
        assert_eq!(want.len(), 3 * 5 + 5);
        match ts_type {
            TimestampType::CreateTime => assert!(want.iter().all(|b| b.timestamp_type == 0)),
            TimestampType::LogAppendTime => assert!(want.iter().all(|b| b.timestamp_type == 1
                && b.records.iter().all(|r| r.timestamp == b.max_timestamp))),
        }
        log.close().expect("close");

        let file = segment_file(&log);
        let report = run_helper("decode", &file);
        let file_len = std::fs::metadata(&file).expect("segment metadata").len();
        assert_eq!(report.file_size, Some(file_len as i64));
        assert_eq!(
            want.iter().map(|b| b.size).sum::<i64>(),
            file_len as i64,
            "the segment holds exactly the appended batches"
        );
        assert_same_batches(&format!("{ts_type:?} segment"), &report.batches, &want);
        let records: usize = want.iter().map(|b| b.records.len()).sum();
        eprintln!(
            "kafka-python {} read {} batches / {records} records ({ts_type:?}) from {} ({file_len} bytes)",
            report.version,
            report.batches.len(),
            file.display()
        );
    }
}

// ------------------------------------------------- (b) kafka-python -> Sluice

#[test]
fn sluice_stores_kafka_python_batches() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let built = tmp.path().join("kafka-python-batches.bin");
    let report = run_helper("build", &built);
    let bytes = std::fs::read(&built).expect("read built batches");
    let mut originals: Vec<Vec<u8>> = Vec::new();
    let mut iter = BatchIter::new(&bytes);
    for b in iter.by_ref() {
        let (_, _, raw) = b.expect("kafka-python batch header parses");
        originals.push(raw.to_vec());
    }
    assert_eq!(
        iter.remainder(),
        0,
        "trailing bytes after kafka-python's batches"
    );
    assert_eq!(originals.len(), report.batches.len());
    for c in Compression::ALL {
        assert!(
            report.batches.iter().any(|b| b.compression == c.name()),
            "kafka-python built no {} batch",
            c.name()
        );
    }

    let clock = Arc::new(ManualClock::new(T0));
    for ts_type in [TimestampType::CreateTime, TimestampType::LogAppendTime] {
        let partition = match ts_type {
            TimestampType::CreateTime => 0,
            TimestampType::LogAppendTime => 1,
        };
        let log = open_log(tmp.path(), partition, ts_type, &clock);
        // One produce request per batch, except the last three together.
        let split = originals.len() - 3;
        let mut requests: Vec<Vec<Vec<u8>>> =
            originals[..split].iter().map(|b| vec![b.clone()]).collect();
        requests.push(originals[split..].to_vec());
        let mut want = Vec::new();
        let mut next = 0i64;
        let mut i = 0usize;
        for (n, request) in requests.iter().enumerate() {
            let now = T0 + 1_000 * n as i64;
            clock.set(now);
            let mut payload = request.concat();
            let info = log
                .append_as_leader(&mut payload, EPOCH)
                .unwrap_or_else(|e| panic!("Sluice rejects kafka-python batch {i}: {e}"));
            assert_eq!(info.base_offset, next);
            for h in &info.batches {
                let py = &report.batches[i];
                assert_eq!(h.base_offset, next);
                assert_eq!(i64::from(h.records_count), py.records_count);
                // What kafka-python made, with the offsets, epoch and (under
                // LogAppendTime) timestamps the broker assigns.
                let mut w = py.clone();
                w.base_offset = next;
                w.last_offset += next;
                w.leader_epoch = i64::from(EPOCH);
                for r in &mut w.records {
                    r.offset += next;
                }
                if ts_type == TimestampType::LogAppendTime {
                    w.timestamp_type = 1;
                    w.max_timestamp = now;
                    for r in &mut w.records {
                        r.timestamp = now;
                    }
                }
                next = h.last_offset() + 1;
                want.push(w);
                i += 1;
            }
        }
        assert_eq!(i, originals.len());
        assert_eq!(log.log_end_offset(), next);

        // Read back through Sluice: the stored bytes are kafka-python's with
        // only the broker-owned fields changed, and Sluice's codec decodes
        // them to what kafka-python put in.
        let stored = read_all_batches(&log);
        assert_eq!(stored.len(), originals.len());
        for (i, ((s, orig), w)) in stored.iter().zip(&originals).zip(&want).enumerate() {
            // Which byte ranges may differ from what kafka-python built.
            let mut patched = vec![0..8, 12..16]; // base offset, leader epoch
            if ts_type == TimestampType::LogAppendTime {
                patched.extend([17..21, 22..23, 35..43]); // crc, attributes, max timestamp
                assert_eq!(
                    s[22] & !0x08,
                    orig[22],
                    "batch {i}: only the timestamp type bit"
                );
                assert_eq!(s[22] & 0x08, 0x08, "batch {i}: LogAppendTime bit");
            }
            assert_eq!(s.len(), orig.len(), "batch {i} size");
            let changed: Vec<usize> = (0..s.len())
                .filter(|&k| s[k] != orig[k] && !patched.iter().any(|r| r.contains(&k)))
                .collect();
            assert!(
                changed.is_empty(),
                "batch {i}: Sluice changed bytes it does not own at {:?}",
                &changed[..changed.len().min(16)]
            );
            assert_eq!(
                s[0..8],
                w.base_offset.to_be_bytes(),
                "batch {i} base offset"
            );
            assert_eq!(s[12..16], EPOCH.to_be_bytes(), "batch {i} leader epoch");
            let (h, records) = decode_records(s);
            assert_same_batch(
                &format!("{ts_type:?}: batch {i} as Sluice decodes it"),
                &PyBatch::from_sluice(&h, records),
                w,
            );
        }
        log.close().expect("close");

        // And kafka-python reads Sluice's segment of its own batches.
        let file = segment_file(&log);
        let back = run_helper("decode", &file);
        assert_same_batches(
            &format!("{ts_type:?} segment of kafka-python batches"),
            &back.batches,
            &want,
        );
        eprintln!(
            "kafka-python {} built {} batches ({} records, all five codecs); Sluice stored them \
             ({ts_type:?}) and both sides decode them alike",
            report.version,
            report.batches.len(),
            want.iter().map(|b| b.records.len()).sum::<usize>()
        );
    }
}
