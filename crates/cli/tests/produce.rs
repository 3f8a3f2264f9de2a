//! `sluice produce` against a real `sluice server`: keys, headers and
//! values land where the Java partitioner says (read back with kcat when
//! installed), `--partition`, every compression codec, and the error exits.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{
    create_topic, fails_with, free_port, have_kcat, kcat_read, ok, sluice, sluice_with_stdin,
    start_server, stderr, Server,
};
use sluice_client::partitioner::partition_for_key;

fn produce(server: &Server, args: &[&str], input: &str) -> std::process::Output {
    let mut all = vec!["produce", "--bootstrap-server", server.addr.as_str()];
    all.extend_from_slice(args);
    sluice_with_stdin(&all, input.as_bytes())
}

#[test]
fn keys_headers_and_partitions() {
    let s = start_server();
    create_topic(&s, "orders", 3);
    let mut input = String::new();
    for i in 0..30 {
        input.push_str(&format!("key-{i}:value {i}: with colon\n"));
    }
    // Kafka's console producer sends empty values too; CRLF is stripped.
    input.push_str("empty:\n");
    input.push_str("crlf:dos line\r\n");
    input.push_str("last:no newline at the end");
    let out = produce(
        &s,
        &[
            "--topic",
            "orders",
            "--key-separator",
            ":",
            "--header",
            "source=cli",
            "--header",
            "trace=a=b",
            "--verbose",
        ],
        &input,
    );
    ok(&out);
    assert_eq!(
        stderr(&out).trim(),
        "33 records sent to orders.",
        "{}",
        stderr(&out)
    );
    if !have_kcat("keys_headers_and_partitions") {
        return;
    }
    let lines = kcat_read(&s, "orders", "%k|%s|%p|%h\n");
    assert_eq!(lines.len(), 33, "{lines:#?}");
    let mut by_key = BTreeMap::new();
    for l in &lines {
        let parts: Vec<&str> = l.split('|').collect();
        assert_eq!(parts.len(), 4, "{l}");
        by_key.insert(
            parts[0].to_string(),
            (
                parts[1].to_string(),
                parts[2].parse::<i32>().unwrap_or(-1),
                parts[3].to_string(),
            ),
        );
    }
    assert_eq!(by_key.len(), 33, "{by_key:#?}");
    for (key, (value, partition, headers)) in &by_key {
        assert_eq!(
            *partition,
            partition_for_key(key.as_bytes(), 3),
            "{key} on the wrong partition"
        );
        assert_eq!(headers, "source=cli,trace=a=b", "{key}");
        if let Some(i) = key.strip_prefix("key-") {
            assert_eq!(*value, format!("value {i}: with colon"));
        }
    }
    assert_eq!(by_key["empty"].0, "");
    assert_eq!(by_key["crlf"].0, "dos line");
    assert_eq!(by_key["last"].0, "no newline at the end");
    // Keys spread over all three partitions.
    let used: std::collections::BTreeSet<i32> = by_key.values().map(|v| v.1).collect();
    assert_eq!(used.len(), 3, "{used:?}");
}

#[test]
fn explicit_partition_and_plain_lines() {
    let s = start_server();
    create_topic(&s, "pinned", 3);
    let input: String = (0..50).map(|i| format!("line {i}\n")).collect();
    ok(&produce(
        &s,
        &["--topic", "pinned", "--partition", "2", "--acks", "1"],
        &input,
    ));
    // Out-of-range partition.
    fails_with(
        &produce(&s, &["--topic", "pinned", "--partition", "3"], "x\n"),
        "partition 3",
    );
    if !have_kcat("explicit_partition_and_plain_lines") {
        return;
    }
    let lines = kcat_read(&s, "pinned", "%p|%s\n");
    let want: Vec<String> = (0..50).map(|i| format!("2|line {i}")).collect();
    assert_eq!(lines, want);
}

#[test]
fn every_compression_codec() {
    let s = start_server();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("c-{codec}");
        create_topic(&s, &topic, 1);
        let input: String = (0..200)
            .map(|i| format!("{codec} record {i} {}\n", "x".repeat(i % 50)))
            .collect();
        ok(&produce(
            &s,
            &[
                "--topic",
                &topic,
                "--compression",
                codec,
                "--linger-ms",
                "20",
                "--batch-size",
                "4096",
                "--acks",
                "-1",
            ],
            &input,
        ));
        if have_kcat("every_compression_codec") {
            let lines = kcat_read(&s, &topic, "%s\n");
            let want: Vec<&str> = input.lines().collect();
            assert_eq!(lines, want, "{codec}");
        }
    }
}

#[test]
fn error_exits() {
    let s = start_server();
    create_topic(&s, "t", 1);
    // A missing topic: see auto_create.rs.
    fails_with(
        &produce(
            &s,
            &["--topic", "t", "--key-separator", "="],
            "k=v\nno separator here\nk2=v2\n",
        ),
        "line 2: no key separator",
    );
    // Bad flag values are usage errors (exit 2) naming the flag.
    for (args, needle) in [
        (&["--topic", "t", "--acks", "2"][..], "--acks"),
        (&["--topic", "t", "--acks", "most"], "--acks"),
        (
            &["--topic", "t", "--compression", "brotli"],
            "--compression",
        ),
        (&["--topic", "t", "--header", "novalue"], "KEY=VALUE"),
        (&["--topic", "t", "--partition", "-1"], "--partition"),
        (&["--acks", "1"], "--topic"),
        (
            &["--topic", "t", "--enable-idempotence", "maybe"],
            "--enable-idempotence",
        ),
        (&["--topic", "t", "--max-in-flight", "0"], "--max-in-flight"),
    ] {
        let o = produce(&s, args, "x\n");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("error:"), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    // Idempotence needs acks=all and at most 5 requests in flight, as in
    // Kafka: conflicting settings fail before anything is sent.
    for (args, needle) in [
        (
            &[
                "--topic",
                "t",
                "--acks",
                "1",
                "--enable-idempotence",
                "true",
            ][..],
            "acks must be all",
        ),
        (&["--topic", "t", "--max-in-flight", "6"], "at most 5"),
    ] {
        fails_with(&produce(&s, args, "x\n"), needle);
    }
    ok(&produce(
        &s,
        &[
            "--topic",
            "t2",
            "--max-in-flight",
            "6",
            "--enable-idempotence",
            "false",
        ],
        "x\n",
    ));
    if have_kcat("error_exits") {
        // Only the line before the bad one reached topic t.
        assert_eq!(kcat_read(&s, "t", "%k=%s\n"), ["k=v"]);
    }
}

#[test]
fn unreachable_bootstrap_server() {
    let addr = format!("127.0.0.1:{}", free_port());
    let start = Instant::now();
    let o = sluice_with_stdin(
        &[
            "produce",
            "--bootstrap-server",
            &addr,
            "--timeout-ms",
            "300",
            "--topic",
            "t",
        ],
        b"a\n",
    );
    fails_with(&o, &format!("cannot connect to {addr}"));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn help() {
    let out = ok(&sluice(&["produce", "--help"]));
    assert!(out.contains("Usage: sluice produce"), "{out}");
    for flag in [
        "--bootstrap-server",
        "--topic",
        "--key-separator",
        "--header",
        "--partition",
        "--acks",
        "--compression",
        "--linger-ms",
        "--batch-size",
    ] {
        assert!(out.contains(flag), "{flag} missing: {out}");
    }
    let out = ok(&sluice(&["--help"]));
    assert!(out.contains("produce") && out.contains("perf"), "{out}");
}

/// `--transactional-id`: the input is one transaction. A run that fails
/// on a bad line aborts it (read_committed consumers see none of it, and
/// are not held back), a good run commits it.
#[test]
fn transactional_id_commits_or_aborts_the_whole_input() {
    let s = start_server();
    create_topic(&s, "txn-cli", 2);
    let out = produce(
        &s,
        &[
            "--topic",
            "txn-cli",
            "--key-separator",
            ":",
            "--transactional-id",
            "cli-tx",
        ],
        "a:aborted-1\nb:aborted-2\nno separator here\n",
    );
    fails_with(&out, "line 3: no key separator");
    let out = produce(
        &s,
        &[
            "--topic",
            "txn-cli",
            "--key-separator",
            ":",
            "--transactional-id",
            "cli-tx",
            "--verbose",
        ],
        "a:committed-1\nb:committed-2\nc:committed-3\n",
    );
    ok(&out);
    assert_eq!(stderr(&out).trim(), "3 records sent to txn-cli.");
    let read = |isolation: &str| {
        let out = sluice(&[
            "consume",
            "--bootstrap-server",
            s.addr.as_str(),
            "--topic",
            "txn-cli",
            "--from-beginning",
            "--isolation-level",
            isolation,
            "--idle-timeout-ms",
            "2000",
        ]);
        let mut values: Vec<String> = ok(&out).lines().map(str::to_string).collect();
        values.sort();
        values
    };
    assert_eq!(
        read("read_committed"),
        vec!["committed-1", "committed-2", "committed-3"]
    );
    assert_eq!(
        read("read_uncommitted"),
        vec![
            "aborted-1",
            "aborted-2",
            "committed-1",
            "committed-2",
            "committed-3"
        ]
    );
}
