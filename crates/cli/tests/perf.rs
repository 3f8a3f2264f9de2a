//! `sluice perf produce|consume|e2e` against a real `sluice server`: the
//! `--json` and text summaries, the `--throughput` cap, `--producers`,
//! reading back what `perf produce` wrote (with and without a group), the
//! consumer's idle timeout, produce-to-consume latency, and error exits.

mod common;

use common::{
    create_topic, fails_with, have_kcat, kcat_read, ok, sluice, start_server, stderr, Server,
};

fn perf_produce(server: &Server, args: &[&str]) -> std::process::Output {
    let mut all = vec![
        "perf",
        "produce",
        "--bootstrap-server",
        server.addr.as_str(),
    ];
    all.extend_from_slice(args);
    sluice(&all)
}

/// The number after `"key":` in flat-or-nested JSON text (first match).
#[track_caller]
fn json_num(json: &str, key: &str) -> f64 {
    let pat = format!("\"{key}\":");
    let at = json
        .find(&pat)
        .unwrap_or_else(|| panic!("{key} missing in {json}"))
        + pat.len();
    let rest = &json[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end]
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{key}: {e} in {json}"))
}

/// The one JSON object printed with `--json`.
#[track_caller]
fn json_output(out: &str) -> String {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line of JSON: {out}");
    let j = lines[0];
    assert!(j.starts_with('{') && j.ends_with('}'), "{j}");
    for key in [
        "records",
        "bytes",
        "elapsed_s",
        "records_per_sec",
        "mb_per_sec",
        "latency_ms",
        "avg",
        "p50",
        "p95",
        "p99",
        "p999",
        "max",
    ] {
        assert!(j.contains(&format!("\"{key}\":")), "{key} missing: {j}");
    }
    j.to_string()
}

fn count_records(server: &Server, topic: &str) -> usize {
    kcat_read(server, topic, "%p\n").len()
}

/// Checks a final summary line in Kafka's perf-test layout.
fn assert_latency_line(last: &str) {
    for part in [
        " records/sec (",
        " MB/sec), ",
        " ms avg latency, ",
        " ms max latency, ",
        " ms 50th, ",
        " ms 95th, ",
        " ms 99th, ",
    ] {
        assert!(last.contains(part), "{part:?} missing: {last}");
    }
    assert!(last.ends_with(" ms 99.9th."), "{last}");
}

#[test]
fn json_summary_and_all_records_arrive() {
    let s = start_server();
    create_topic(&s, "perf", 3);
    let out = ok(&perf_produce(
        &s,
        &[
            "--topic",
            "perf",
            "--num-records",
            "20000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--json",
        ],
    ));
    let j = json_output(&out);
    assert_eq!(json_num(&j, "records"), 20_000.0, "{j}");
    assert_eq!(json_num(&j, "bytes"), 2_000_000.0, "{j}");
    assert!(json_num(&j, "elapsed_s") > 0.0, "{j}");
    assert!(json_num(&j, "records_per_sec") > 0.0, "{j}");
    assert!(json_num(&j, "mb_per_sec") > 0.0, "{j}");
    let p = ["p50", "p95", "p99", "p999", "max"].map(|k| json_num(&j, k));
    assert!(p.windows(2).all(|w| w[0] <= w[1]), "unordered: {j}");
    assert!(json_num(&j, "avg") <= p[4], "{j}");
    if have_kcat("json_summary_and_all_records_arrive") {
        assert_eq!(count_records(&s, "perf"), 20_000);
        let sizes = kcat_read(&s, "perf", "%S\n");
        assert!(sizes.iter().all(|l| l == "100"), "value sizes");
    }
}

#[test]
fn text_summary_and_compression() {
    let s = start_server();
    create_topic(&s, "text", 1);
    let out = ok(&perf_produce(
        &s,
        &[
            "--topic",
            "text",
            "--num-records",
            "3000",
            "--record-size",
            "512",
            "--compression",
            "lz4",
            "--acks",
            "1",
            "--linger-ms",
            "10",
            "--batch-size",
            "65536",
        ],
    ));
    let last = out.lines().last().unwrap_or("");
    assert!(last.starts_with("3000 records sent, "), "{out}");
    assert_latency_line(last);
    if have_kcat("text_summary_and_compression") {
        assert_eq!(count_records(&s, "text"), 3000);
    }
}

#[test]
fn throughput_cap_and_several_producers() {
    let s = start_server();
    create_topic(&s, "capped", 2);
    let out = ok(&perf_produce(
        &s,
        &[
            "--topic",
            "capped",
            "--num-records",
            "2000",
            "--record-size",
            "50",
            "--throughput",
            "2000",
            "--json",
        ],
    ));
    let j = json_output(&out);
    assert_eq!(json_num(&j, "records"), 2000.0, "{j}");
    assert!(
        json_num(&j, "elapsed_s") >= 0.5,
        "throttle not applied: {j}"
    );

    create_topic(&s, "multi", 4);
    let out = ok(&perf_produce(
        &s,
        &[
            "--topic",
            "multi",
            "--num-records",
            "5001",
            "--record-size",
            "10",
            "--producers",
            "2",
            "--json",
        ],
    ));
    let j = json_output(&out);
    assert_eq!(json_num(&j, "records"), 5001.0, "{j}");
    assert_eq!(json_num(&j, "bytes"), 50_010.0, "{j}");
    if have_kcat("throughput_cap_and_several_producers") {
        assert_eq!(count_records(&s, "capped"), 2000);
        assert_eq!(count_records(&s, "multi"), 5001);
    }
}

#[test]
fn payload_file() {
    let s = start_server();
    create_topic(&s, "payloads", 1);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let path = dir.path().join("payloads.txt");
    std::fs::write(&path, "alpha\nbeta\ngamma\n").unwrap_or_else(|e| panic!("write: {e}"));
    let path = path.display().to_string();
    let out = ok(&perf_produce(
        &s,
        &[
            "--topic",
            "payloads",
            "--num-records",
            "300",
            "--payload-file",
            &path,
            "--json",
        ],
    ));
    assert_eq!(json_num(&json_output(&out), "records"), 300.0);
    if have_kcat("payload_file") {
        let values = kcat_read(&s, "payloads", "%s\n");
        assert_eq!(values.len(), 300);
        assert!(values
            .iter()
            .all(|v| ["alpha", "beta", "gamma"].contains(&v.as_str())));
    }
}

#[test]
fn error_exits() {
    let s = start_server();
    // A missing topic: see auto_create.rs.
    create_topic(&s, "t", 1);
    fails_with(
        &perf_produce(
            &s,
            &["--topic", "t", "--num-records", "10", "--throughput", "0"],
        ),
        "--throughput",
    );
    for (args, needle) in [
        (&["--topic", "t"][..], "--num-records"),
        (&["--topic", "t", "--num-records", "0"], "--num-records"),
        (
            &["--topic", "t", "--num-records", "5", "--acks", "3"],
            "--acks",
        ),
        (
            &["--topic", "t", "--num-records", "5", "--compression", "xz"],
            "--compression",
        ),
        (
            &["--topic", "t", "--num-records", "5", "--producers", "0"],
            "--producers",
        ),
        (
            &[
                "--topic",
                "t",
                "--num-records",
                "5",
                "--record-size",
                "5",
                "--payload-file",
                "f",
            ],
            "--payload-file",
        ),
    ] {
        let o = perf_produce(&s, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn help() {
    let out = ok(&sluice(&["perf", "--help"]));
    assert!(out.contains("produce"), "{out}");
    let out = ok(&sluice(&["perf", "produce", "--help"]));
    assert!(out.contains("Usage: sluice perf produce"), "{out}");
    for flag in [
        "--bootstrap-server",
        "--topic",
        "--num-records",
        "--record-size",
        "--throughput",
        "--acks",
        "--batch-size",
        "--linger-ms",
        "--compression",
        "--producers",
        "--json",
    ] {
        assert!(out.contains(flag), "{flag} missing: {out}");
    }
}

fn perf(server: &Server, sub: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["perf", sub, "--bootstrap-server", server.addr.as_str()];
    all.extend_from_slice(args);
    sluice(&all)
}

/// The one JSON object printed by `perf consume --json`.
#[track_caller]
fn consume_json(out: &str) -> String {
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line of JSON: {out}");
    let j = lines[0];
    assert!(j.starts_with('{') && j.ends_with('}'), "{j}");
    for key in [
        "records",
        "bytes",
        "elapsed_s",
        "records_per_sec",
        "mb_per_sec",
        "start_time",
        "end_time",
        "rebalance_ms",
        "fetch_ms",
        "fetch_mb_per_sec",
        "fetch_records_per_sec",
    ] {
        assert!(j.contains(&format!("\"{key}\":")), "{key} missing: {j}");
    }
    assert!(!j.contains("latency_ms"), "{j}");
    j.to_string()
}

fn produce_records(server: &Server, topic: &str, n: u64, size: u32) {
    let (n, size) = (n.to_string(), size.to_string());
    let out = ok(&perf_produce(
        server,
        &[
            "--topic",
            topic,
            "--num-records",
            &n,
            "--record-size",
            &size,
            "--acks",
            "1",
            "--json",
        ],
    ));
    assert_eq!(json_num(&json_output(&out), "records").to_string(), n);
}

#[test]
fn consume_reads_what_produce_wrote() {
    let s = start_server();
    create_topic(&s, "cons", 3);
    produce_records(&s, "cons", 20_000, 100);

    // No group: all partitions from the beginning.
    let out = ok(&perf(
        &s,
        "consume",
        &["--topic", "cons", "--num-records", "20000", "--json"],
    ));
    let j = consume_json(&out);
    assert_eq!(json_num(&j, "records"), 20_000.0, "{j}");
    assert_eq!(json_num(&j, "bytes"), 2_000_000.0, "{j}");
    assert_eq!(json_num(&j, "rebalance_ms"), 0.0, "{j}");
    assert!(json_num(&j, "elapsed_s") > 0.0, "{j}");
    assert!(json_num(&j, "records_per_sec") > 0.0, "{j}");
    assert!(json_num(&j, "mb_per_sec") > 0.0, "{j}");

    // Fewer than there are: stops at exactly N.
    let out = ok(&perf(
        &s,
        "consume",
        &[
            "--topic",
            "cons",
            "--num-records",
            "1234",
            "--max-poll-records",
            "100",
            "--fetch-size",
            "10000",
            "--json",
        ],
    ));
    let j = consume_json(&out);
    assert_eq!(json_num(&j, "records"), 1234.0, "{j}");
    assert_eq!(json_num(&j, "bytes"), 123_400.0, "{j}");

    // In a group: subscribe, join, read from the beginning.
    let out = ok(&perf(
        &s,
        "consume",
        &[
            "--topic",
            "cons",
            "--num-records",
            "20000",
            "--group",
            "perf-group",
            "--json",
        ],
    ));
    let j = consume_json(&out);
    assert_eq!(json_num(&j, "records"), 20_000.0, "{j}");
    assert_eq!(json_num(&j, "bytes"), 2_000_000.0, "{j}");
    assert!(
        json_num(&j, "rebalance_ms") <= json_num(&j, "elapsed_s") * 1000.0 + 1.0,
        "{j}"
    );

    // Text: Kafka's header and one data line.
    let out = ok(&perf(
        &s,
        "consume",
        &["--topic", "cons", "--num-records", "5000"],
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(
        lines[0],
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
         rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    );
    let fields: Vec<&str> = lines[1].split(", ").collect();
    assert_eq!(fields.len(), 10, "{out}");
    assert_eq!(fields[2], "0.4768", "{out}");
    assert_eq!(fields[4], "5000", "{out}");
    let out = ok(&perf(
        &s,
        "consume",
        &["--topic", "cons", "--num-records", "10", "--hide-header"],
    ));
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains(", 10, "), "{out}");
}

#[test]
fn consume_fails_when_records_stop_arriving() {
    let s = start_server();
    create_topic(&s, "short", 2);
    produce_records(&s, "short", 300, 100);
    let started = std::time::Instant::now();
    let o = perf(
        &s,
        "consume",
        &[
            "--topic",
            "short",
            "--num-records",
            "1000",
            "--idle-timeout-ms",
            "2000",
        ],
    );
    let took = started.elapsed();
    fails_with(&o, "idle timeout of 2000 ms");
    assert!(
        stderr(&o).contains("consumed 300 of 1000 records"),
        "{}",
        stderr(&o)
    );
    assert!(took < std::time::Duration::from_secs(15), "took {took:?}");
    assert!(
        took >= std::time::Duration::from_millis(1900),
        "took {took:?}"
    );

    // An empty topic in a group: fails the same way, never hangs.
    create_topic(&s, "empty", 1);
    let o = perf(
        &s,
        "consume",
        &[
            "--topic",
            "empty",
            "--num-records",
            "1",
            "--group",
            "g",
            "--idle-timeout-ms",
            "2000",
        ],
    );
    fails_with(&o, "--idle-timeout-ms");
    assert!(
        stderr(&o).contains("consumed 0 of 1 records"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn e2e_latency() {
    let s = start_server();
    create_topic(&s, "lat", 2);
    // Older records are skipped: the consumer starts at the log end.
    produce_records(&s, "lat", 1000, 100);
    let out = ok(&perf(
        &s,
        "e2e",
        &[
            "--topic",
            "lat",
            "--num-records",
            "500",
            "--throughput",
            "500",
            "--json",
        ],
    ));
    let j = json_output(&out);
    assert_eq!(json_num(&j, "records"), 500.0, "{j}");
    assert_eq!(json_num(&j, "bytes"), 50_000.0, "{j}");
    // 500 records at 500/s: the last one is sent about 1 s after the first.
    assert!(json_num(&j, "elapsed_s") >= 0.9, "{j}");
    let p = ["p50", "p95", "p99", "p999", "max"].map(|k| json_num(&j, k));
    assert!(p.windows(2).all(|w| w[0] <= w[1]), "unordered: {j}");
    assert!(p[0] > 0.0, "{j}");
    assert!(json_num(&j, "avg") <= p[4], "{j}");

    let out = ok(&perf(
        &s,
        "e2e",
        &[
            "--topic",
            "lat",
            "--num-records",
            "200",
            "--record-size",
            "16",
            "--acks",
            "1",
            "--throughput",
            "-1",
            "--linger-ms",
            "2",
        ],
    ));
    let last = out.lines().last().unwrap_or("");
    assert!(last.starts_with("200 records received, "), "{out}");
    assert_latency_line(last);
    if have_kcat("e2e_latency") {
        assert_eq!(count_records(&s, "lat"), 1700);
    }
}

#[test]
fn consume_and_e2e_errors() {
    let s = start_server();
    fails_with(
        &perf(&s, "consume", &["--topic", "nope", "--num-records", "10"]),
        "topic nope does not exist",
    );
    fails_with(
        &perf(&s, "e2e", &["--topic", "nope", "--num-records", "10"]),
        "topic nope does not exist",
    );
    create_topic(&s, "t", 1);
    fails_with(
        &perf(
            &s,
            "e2e",
            &["--topic", "t", "--num-records", "10", "--throughput", "0"],
        ),
        "--throughput",
    );
    for (sub, args, needle) in [
        ("consume", &["--topic", "t"][..], "--num-records"),
        (
            "consume",
            &["--topic", "t", "--num-records", "0"],
            "--num-records",
        ),
        (
            "consume",
            &[
                "--topic",
                "t",
                "--num-records",
                "5",
                "--max-poll-records",
                "0",
            ],
            "--max-poll-records",
        ),
        (
            "consume",
            &["--topic", "t", "--num-records", "5", "--fetch-size", "0"],
            "--fetch-size",
        ),
        (
            "consume",
            &[
                "--topic",
                "t",
                "--num-records",
                "5",
                "--idle-timeout-ms",
                "x",
            ],
            "--idle-timeout-ms",
        ),
        (
            "consume",
            &[
                "--topic",
                "t",
                "--num-records",
                "5",
                "--json",
                "--hide-header",
            ],
            "--hide-header",
        ),
        (
            "consume",
            &["--topic", "t", "--num-records", "5", "--bogus"],
            "--bogus",
        ),
        ("e2e", &["--topic", "t"][..], "--num-records"),
        (
            "e2e",
            &["--topic", "t", "--num-records", "5", "--record-size", "15"],
            "--record-size",
        ),
        (
            "e2e",
            &["--topic", "t", "--num-records", "5", "--acks", "3"],
            "--acks",
        ),
        (
            "e2e",
            &["--topic", "t", "--num-records", "5", "--compression", "xz"],
            "--compression",
        ),
    ] {
        let o = perf(&s, sub, args);
        assert_eq!(o.status.code(), Some(2), "{sub} {args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(needle),
            "{sub} {args:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn consume_and_e2e_help() {
    let out = ok(&sluice(&["perf", "--help"]));
    for sub in ["produce", "consume", "e2e"] {
        assert!(out.contains(sub), "{sub} missing: {out}");
    }
    let out = ok(&sluice(&["perf", "consume", "--help"]));
    assert!(out.contains("Usage: sluice perf consume"), "{out}");
    for flag in [
        "--bootstrap-server",
        "--topic",
        "--num-records",
        "--group",
        "--fetch-size",
        "--max-partition-fetch-bytes",
        "--fetch-max-bytes",
        "--max-poll-records",
        "--idle-timeout-ms",
        "--hide-header",
        "--json",
    ] {
        assert!(out.contains(flag), "{flag} missing: {out}");
    }
    let out = ok(&sluice(&["perf", "e2e", "--help"]));
    assert!(out.contains("Usage: sluice perf e2e"), "{out}");
    for flag in [
        "--bootstrap-server",
        "--topic",
        "--num-records",
        "--record-size",
        "--throughput",
        "--acks",
        "--compression",
        "--linger-ms",
        "--batch-size",
        "--idle-timeout-ms",
        "--json",
    ] {
        assert!(out.contains(flag), "{flag} missing: {out}");
    }
}

/// `perf produce --transactional-id` with two producers: each instance
/// (`ID-0`, `ID-1`) sends its share in one transaction and commits it, so
/// a read_committed consumer sees every record.
#[test]
fn transactional_producers_commit_their_records() {
    let s = start_server();
    create_topic(&s, "perf-txn", 2);
    let out = ok(&perf_produce(
        &s,
        &[
            "--topic",
            "perf-txn",
            "--num-records",
            "1000",
            "--record-size",
            "20",
            "--producers",
            "2",
            "--transactional-id",
            "perf-tx",
            "--json",
        ],
    ));
    let j = json_output(&out);
    assert_eq!(json_num(&j, "records"), 1000.0, "{j}");
    let out = ok(&sluice(&[
        "consume",
        "--bootstrap-server",
        s.addr.as_str(),
        "--topic",
        "perf-txn",
        "--from-beginning",
        "--isolation-level",
        "read_committed",
        "--idle-timeout-ms",
        "2000",
    ]));
    assert_eq!(out.lines().count(), 1000);
}
