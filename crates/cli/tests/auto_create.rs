//! Producing to a topic that does not exist, as Kafka's console producer
//! and perf test do: the producer's metadata requests ask the broker to
//! create it, so it is created with the broker's defaults when
//! `auto.create.topics.enable` is on, and the command fails naming the
//! topic when it is off.

mod common;

use common::{fails_with, ok, sluice, sluice_with_stdin, start_server_with, Server};

fn produce(server: &Server, topic: &str, input: &str) -> std::process::Output {
    sluice_with_stdin(
        &[
            "produce",
            "--bootstrap-server",
            &server.addr,
            "--topic",
            topic,
        ],
        input.as_bytes(),
    )
}

fn perf_produce(server: &Server, topic: &str) -> std::process::Output {
    sluice(&[
        "perf",
        "produce",
        "--bootstrap-server",
        &server.addr,
        "--topic",
        topic,
        "--num-records",
        "50",
        "--record-size",
        "20",
        "--json",
    ])
}

/// `sluice topic describe` output of `topic`: its partition count.
fn partition_count(server: &Server, topic: &str) -> String {
    let out = ok(&sluice(&[
        "topic",
        "--bootstrap-server",
        &server.addr,
        "describe",
        topic,
    ]));
    let first = out.lines().next().unwrap_or_default().to_string();
    first
        .split('\t')
        .find_map(|f| f.strip_prefix("PartitionCount: "))
        .unwrap_or_else(|| panic!("no partition count in {out}"))
        .to_string()
}

/// Every record of `topic` read back with `sluice consume`.
fn read_back(server: &Server, topic: &str, n: usize) -> Vec<String> {
    let out = ok(&sluice(&[
        "consume",
        "--bootstrap-server",
        &server.addr,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        &n.to_string(),
        "--idle-timeout-ms",
        "10000",
    ]));
    out.lines().map(str::to_string).collect()
}

#[test]
fn produce_creates_a_missing_topic_with_the_broker_defaults() {
    let s = start_server_with(&["--override", "num.partitions=3"]);
    ok(&produce(&s, "fresh", "one\ntwo\nthree\n"));
    assert_eq!(partition_count(&s, "fresh"), "3");
    let mut got = read_back(&s, "fresh", 3);
    got.sort();
    assert_eq!(got, ["one", "three", "two"]);
    ok(&perf_produce(&s, "fresh-perf"));
    assert_eq!(partition_count(&s, "fresh-perf"), "3");
}

#[test]
fn produce_to_a_missing_topic_fails_without_auto_creation() {
    let s = start_server_with(&["--override", "auto.create.topics.enable=false"]);
    let needle = "topic nope does not exist and the broker does not create topics on first use";
    fails_with(&produce(&s, "nope", "a\nb\n"), needle);
    fails_with(&perf_produce(&s, "nope"), needle);
    // Nothing was created.
    let out = sluice(&["topic", "--bootstrap-server", &s.addr, "describe", "nope"]);
    assert!(!out.status.success());
}
