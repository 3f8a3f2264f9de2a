//! `sluice topic create|list|describe|alter|delete` against a real
//! `sluice server` started from the same binary, plus error exits (existing
//! topic, unknown topic, bad flags, unreachable bootstrap server).

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::{fails_with, free_port, ok, sluice, start_server, stderr, Server};

fn topic(server: &Server, args: &[&str]) -> Output {
    let mut all = vec!["topic", "--bootstrap-server", server.addr.as_str()];
    all.extend_from_slice(args);
    sluice(&all)
}

#[test]
fn create_list_describe_alter_delete() {
    let s = start_server();
    let out = ok(&topic(
        &s,
        &[
            "create",
            "orders",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "cleanup.policy=compact",
            "--config",
            "retention.ms=60000",
        ],
    ));
    assert!(out.contains("Created topic orders"), "{out}");
    ok(&topic(&s, &["create", "audit"]));

    let list = ok(&topic(&s, &["list"]));
    let names: Vec<&str> = list.lines().collect();
    assert_eq!(names, ["audit", "orders"]);

    let d = ok(&topic(&s, &["describe", "orders"]));
    let lines: Vec<&str> = d.lines().collect();
    assert_eq!(lines.len(), 4, "{d}");
    assert!(lines[0].starts_with("Topic: orders\tTopicId: "), "{d}");
    assert!(
        lines[0].contains("\tPartitionCount: 3\tReplicationFactor: 1\t"),
        "{d}"
    );
    assert!(
        lines[0].ends_with("Configs: cleanup.policy=compact,retention.ms=60000"),
        "{d}"
    );
    for (i, l) in lines[1..].iter().enumerate() {
        assert_eq!(
            *l,
            format!("\tTopic: orders\tPartition: {i}\tLeader: 1\tReplicas: 1\tIsr: 1")
        );
    }

    // Add partitions and change configs in one go.
    let out = ok(&topic(
        &s,
        &[
            "alter",
            "orders",
            "--partitions",
            "5",
            "--config",
            "retention.ms=120000",
            "--delete-config",
            "cleanup.policy",
        ],
    ));
    assert!(out.contains("now has 5 partitions"), "{out}");
    let d = ok(&topic(&s, &["describe", "orders"]));
    assert!(d.contains("PartitionCount: 5"), "{d}");
    assert!(
        d.lines()
            .next()
            .unwrap_or("")
            .ends_with("Configs: retention.ms=120000"),
        "{d}"
    );
    assert!(d.contains("\tPartition: 4\tLeader: 1"), "{d}");

    // Describe without names: every topic.
    let all = ok(&topic(&s, &["describe"]));
    assert!(
        all.contains("Topic: audit\t") && all.contains("Topic: orders\t"),
        "{all}"
    );

    let out = ok(&topic(&s, &["delete", "orders"]));
    assert!(out.contains("Deleted topic orders"), "{out}");
    assert_eq!(ok(&topic(&s, &["list"])), "audit\n");
}

#[test]
fn error_exits() {
    let s = start_server();
    ok(&topic(&s, &["create", "t", "--partitions", "2"]));
    fails_with(&topic(&s, &["create", "t"]), "TopicAlreadyExists");
    // --if-not-exists turns that into success.
    ok(&topic(&s, &["create", "t", "--if-not-exists"]));

    fails_with(&topic(&s, &["describe", "nope"]), "UnknownTopicOrPartition");
    fails_with(
        &topic(&s, &["alter", "nope", "--partitions", "3"]),
        "UnknownTopicOrPartition",
    );
    fails_with(&topic(&s, &["delete", "nope"]), "UnknownTopicOrPartition");
    // Partitions can only grow.
    fails_with(&topic(&s, &["alter", "t", "--partitions", "1"]), "sluice: ");
    fails_with(&topic(&s, &["alter", "t"]), "nothing to do");
    fails_with(
        &topic(&s, &["create", "u", "--partitions", "0"]),
        "--partitions must be at least 1",
    );
    fails_with(
        &topic(
            &s,
            &["alter", "t", "--config", "a=1", "--delete-config", "a"],
        ),
        "both set",
    );

    // Bad flags and bad --config format are usage errors (exit 2).
    for args in [
        &["create", "u", "--config", "no-equals-sign"][..],
        &["create", "u", "--bogus"],
        &["create", "u", "--partitions", "many"],
        &["delete"],
        &["frobnicate"],
    ] {
        let o = topic(&s, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("error:"), "{args:?}: {}", stderr(&o));
    }
    let o = topic(&s, &["create", "u", "--config", "oops"]);
    assert!(stderr(&o).contains("expected KEY=VALUE"), "{}", stderr(&o));
    // Nothing was created by the failures.
    assert_eq!(ok(&topic(&s, &["list"])), "t\n");
}

#[test]
fn unreachable_bootstrap_server() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let start = Instant::now();
    let o = sluice(&[
        "topic",
        "--bootstrap-server",
        &addr,
        "--timeout-ms",
        "300",
        "list",
    ]);
    fails_with(&o, &format!("cannot connect to {addr}"));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn help_everywhere() {
    for args in [
        &["topic", "--help"][..],
        &["topic", "create", "--help"],
        &["topic", "list", "--help"],
        &["topic", "describe", "--help"],
        &["topic", "alter", "--help"],
        &["topic", "delete", "--help"],
    ] {
        let o = sluice(args);
        let out = ok(&o);
        assert!(out.contains("Usage: sluice topic"), "{args:?}: {out}");
    }
    let out = ok(&sluice(&["topic", "create", "--help"]));
    for flag in [
        "--bootstrap-server",
        "--partitions",
        "--replication-factor",
        "--config",
    ] {
        assert!(out.contains(flag), "{flag} missing: {out}");
    }
    let out = ok(&sluice(&["topic", "alter", "--help"]));
    assert!(out.contains("--delete-config"), "{out}");
}
