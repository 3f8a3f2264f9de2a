//! `sluice group list|describe|reset-offsets|delete` against a real
//! `sluice server` started from the same binary, with groups made by
//! `sluice consume --group`: lag numbers, dry runs, every reset scenario,
//! the active-group refusal, deletes and the error exits.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    create_topic, fails_with, free_port, ok, produce_keyed, sluice, start_server, stderr, Server,
    BIN,
};

/// Produces `k{i}:v{i}` for `i` in `n` to one partition.
fn produce(server: &Server, topic: &str, partition: i32, n: std::ops::Range<u32>) {
    let lines: Vec<String> = n.map(|i| format!("k{i}:v{i}")).collect();
    produce_keyed(server, topic, partition, &lines, &[]);
}

fn group(server: &Server, args: &[&str]) -> Output {
    let mut all = vec!["group", "--bootstrap-server", server.addr.as_str()];
    all.extend_from_slice(args);
    sluice(&all)
}

/// `sluice consume --group G --from-beginning --max-messages N`.
fn consume_n(server: &Server, topic: &str, g: &str, n: u32) -> Vec<String> {
    let n = n.to_string();
    let o = sluice(&[
        "consume",
        "--bootstrap-server",
        &server.addr,
        "--topic",
        topic,
        "--group",
        g,
        "--from-beginning",
        "--max-messages",
        &n,
    ]);
    ok(&o).lines().map(str::to_string).collect()
}

/// One `describe` row: (current offset, log end offset, lag, consumer id).
type Row = (String, String, String, String);

/// (topic, partition).
type Partition = (String, i32);

/// The describe rows of group `g`, by (topic, partition).
fn describe(server: &Server, g: &str) -> (String, Vec<(Partition, Row)>) {
    let out = ok(&group(server, &["describe", g]));
    let mut rows = Vec::new();
    let mut header = false;
    for line in out.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.first() == Some(&"GROUP") {
            assert_eq!(
                cols,
                [
                    "GROUP",
                    "TOPIC",
                    "PARTITION",
                    "CURRENT-OFFSET",
                    "LOG-END-OFFSET",
                    "LAG",
                    "CONSUMER-ID",
                    "HOST",
                    "CLIENT-ID"
                ]
            );
            header = true;
        } else if header && !cols.is_empty() {
            assert_eq!(cols.len(), 9, "{out}");
            assert_eq!(cols[0], g);
            let p = cols[2].parse().unwrap_or(-1);
            rows.push((
                (cols[1].to_string(), p),
                (
                    cols[3].to_string(),
                    cols[4].to_string(),
                    cols[5].to_string(),
                    cols[6].to_string(),
                ),
            ));
        }
    }
    (out, rows)
}

/// (current, log end, lag) of every partition of `g`, as numbers.
fn offsets(server: &Server, g: &str) -> Vec<(i32, i64, i64, i64)> {
    let (out, rows) = describe(server, g);
    rows.into_iter()
        .map(|((_, p), (c, e, l, _))| {
            let n = |s: &str| {
                s.parse::<i64>()
                    .unwrap_or_else(|_| panic!("not a number {s:?} in {out}"))
            };
            (p, n(&c), n(&e), n(&l))
        })
        .collect()
}

fn reset(server: &Server, g: &str, args: &[&str]) -> String {
    let mut all = vec!["reset-offsets", "--group", g, "--topic", "t"];
    all.extend_from_slice(args);
    ok(&group(server, &all))
}

/// A `sluice` child killed by its PID on drop.
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Formats epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.mmm` (UTC).
fn datetime(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[test]
fn list_and_describe_lag() {
    let s = start_server();
    create_topic(&s, "t", 2);
    produce(&s, "t", 0, 0..10);
    assert_eq!(consume_n(&s, "t", "g1", 4), ["v0", "v1", "v2", "v3"]);

    let list = ok(&group(&s, &["list"]));
    assert!(list.lines().any(|l| l == "g1"), "{list}");
    let list = ok(&group(&s, &["list", "--state"]));
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["g1", "Empty"]),
        "{list}"
    );

    let (out, rows) = describe(&s, "g1");
    assert!(
        out.contains("Consumer group 'g1' has no active members."),
        "{out}"
    );
    let dash = || "-".to_string();
    assert_eq!(
        rows,
        [
            (
                ("t".to_string(), 0),
                ("4".to_string(), "10".to_string(), "6".to_string(), dash())
            ),
            (
                ("t".to_string(), 1),
                ("0".to_string(), "0".to_string(), "0".to_string(), dash())
            ),
        ]
    );
    // Two more read: lag goes down.
    assert_eq!(consume_n(&s, "t", "g1", 2), ["v4", "v5"]);
    assert_eq!(offsets(&s, "g1"), [(0, 6, 10, 4), (1, 0, 0, 0)]);

    let state = ok(&group(&s, &["describe", "g1", "--state"]));
    assert!(state.contains("ASSIGNMENT-STRATEGY"), "{state}");
    assert!(state.contains("Empty"), "{state}");
    let members = ok(&group(&s, &["describe", "g1", "--members"]));
    assert!(members.contains("has no active members"), "{members}");
}

#[test]
fn reset_offsets_scenarios() {
    let s = start_server();
    create_topic(&s, "t", 2);
    produce(&s, "t", 0, 0..5);
    std::thread::sleep(Duration::from_millis(100));
    let middle = now_ms();
    std::thread::sleep(Duration::from_millis(100));
    produce(&s, "t", 0, 5..10);
    produce(&s, "t", 1, 0..4);
    assert_eq!(consume_n(&s, "t", "r", 14).len(), 14);
    assert_eq!(offsets(&s, "r"), [(0, 10, 10, 0), (1, 4, 4, 0)]);

    // Dry run (explicit or by default) prints the plan and changes nothing.
    for flag in [&["--dry-run"][..], &[]] {
        let mut args = vec!["--to-earliest"];
        args.extend_from_slice(flag);
        let plan = reset(&s, "r", &args);
        let rows: Vec<Vec<&str>> = plan
            .lines()
            .map(|l| l.split_whitespace().collect())
            .filter(|c: &Vec<&str>| !c.is_empty())
            .collect();
        assert_eq!(
            rows,
            [
                vec!["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                vec!["r", "t", "0", "0"],
                vec!["r", "t", "1", "0"],
            ]
        );
        assert_eq!(offsets(&s, "r"), [(0, 10, 10, 0), (1, 4, 4, 0)]);
    }

    reset(&s, "r", &["--to-earliest", "--execute"]);
    assert_eq!(offsets(&s, "r"), [(0, 0, 10, 10), (1, 0, 4, 4)]);
    // Clamped to the end of partition 1.
    reset(&s, "r", &["--to-offset", "7", "--execute"]);
    assert_eq!(offsets(&s, "r"), [(0, 7, 10, 3), (1, 4, 4, 0)]);
    reset(&s, "r", &["--shift-by", "-2", "--execute"]);
    assert_eq!(offsets(&s, "r"), [(0, 5, 10, 5), (1, 2, 4, 2)]);
    reset(&s, "r", &["--shift-by", "-100", "--execute"]);
    assert_eq!(offsets(&s, "r"), [(0, 0, 10, 10), (1, 0, 4, 4)]);
    reset(&s, "r", &["--to-latest", "--execute"]);
    assert_eq!(offsets(&s, "r"), [(0, 10, 10, 0), (1, 4, 4, 0)]);
    // The time between the two batches of partition 0; partition 1 was
    // written after it.
    reset(&s, "r", &["--to-datetime", &datetime(middle), "--execute"]);
    assert_eq!(offsets(&s, "r"), [(0, 5, 10, 5), (1, 0, 4, 4)]);
    reset(
        &s,
        "r",
        &["--to-datetime", "2000-01-01T00:00:00Z", "--execute"],
    );
    assert_eq!(offsets(&s, "r"), [(0, 0, 10, 10), (1, 0, 4, 4)]);
    // Later than every record: the log end.
    reset(
        &s,
        "r",
        &["--to-datetime", "2999-01-01T00:00:00", "--execute"],
    );
    assert_eq!(offsets(&s, "r"), [(0, 10, 10, 0), (1, 4, 4, 0)]);

    // One partition only, and --all-topics.
    let out = ok(&group(
        &s,
        &[
            "reset-offsets",
            "--group",
            "r",
            "--topic",
            "t:1",
            "--to-offset",
            "1",
            "--execute",
        ],
    ));
    assert!(!out.contains("r t 0"), "{out}");
    assert_eq!(offsets(&s, "r"), [(0, 10, 10, 0), (1, 1, 4, 3)]);
    ok(&group(
        &s,
        &[
            "reset-offsets",
            "--group",
            "r",
            "--all-topics",
            "--to-offset",
            "3",
            "--execute",
        ],
    ));
    assert_eq!(offsets(&s, "r"), [(0, 3, 10, 7), (1, 3, 4, 1)]);
    // The group reads from the reset offsets.
    assert_eq!(consume_n(&s, "t", "r", 8).len(), 8);
    assert_eq!(offsets(&s, "r"), [(0, 10, 10, 0), (1, 4, 4, 0)]);
}

#[test]
fn active_group_cannot_be_reset_or_deleted() {
    let s = start_server();
    create_topic(&s, "t", 1);
    produce(&s, "t", 0, 0..3);
    let mut child = Bg(Command::new(BIN)
        .args(["consume", "--bootstrap-server", &s.addr, "--topic", "t"])
        .args(["--group", "live", "--from-beginning"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sluice consume: {e}")));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = group(&s, &["describe", "live"]);
        if o.status.success() {
            let (_, rows) = describe(&s, "live");
            if rows.iter().any(|(_, (_, _, _, id))| id != "-") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the consumer never showed up");
        std::thread::sleep(Duration::from_millis(300));
    }
    let members = ok(&group(&s, &["describe", "live", "--members"]));
    assert!(members.contains("sluice-cli"), "{members}");
    for extra in [&["--execute"][..], &["--dry-run"]] {
        let mut args = vec![
            "reset-offsets",
            "--group",
            "live",
            "--topic",
            "t",
            "--to-earliest",
        ];
        args.extend_from_slice(extra);
        fails_with(
            &group(&s, &args),
            "Assignments can only be reset if the group 'live' is inactive",
        );
    }
    fails_with(&group(&s, &["delete", "live"]), "has active members");

    // SIGINT: the member leaves at once.
    let status = Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status()
        .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(st) = child.0.try_wait().unwrap_or_else(|e| panic!("{e}")) {
            break st;
        }
        assert!(Instant::now() < deadline, "consume did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit:?}");
    let (out, _) = describe(&s, "live");
    assert!(out.contains("has no active members"), "{out}");
    reset(&s, "live", &["--to-earliest", "--execute"]);
    assert_eq!(offsets(&s, "live"), [(0, 0, 3, 3)]);
}

#[test]
fn delete_groups() {
    let s = start_server();
    create_topic(&s, "t", 1);
    produce(&s, "t", 0, 0..2);
    consume_n(&s, "t", "d1", 1);
    consume_n(&s, "t", "d2", 1);
    let out = ok(&group(&s, &["delete", "d1", "d2"]));
    assert!(out.contains("Deleted consumer group 'd1'."), "{out}");
    assert!(out.contains("Deleted consumer group 'd2'."), "{out}");
    let list = ok(&group(&s, &["list"]));
    assert!(!list.lines().any(|l| l == "d1" || l == "d2"), "{list}");
    fails_with(
        &group(&s, &["describe", "d1"]),
        "Consumer group 'd1' does not exist.",
    );
    fails_with(
        &group(&s, &["delete", "nope"]),
        "Consumer group 'nope' does not exist.",
    );
}

#[test]
fn error_exits() {
    let s = start_server();
    create_topic(&s, "t", 1);
    fails_with(
        &group(&s, &["describe", "ghost"]),
        "Consumer group 'ghost' does not exist.",
    );
    fails_with(
        &group(
            &s,
            &[
                "reset-offsets",
                "--group",
                "x",
                "--topic",
                "nope",
                "--to-earliest",
            ],
        ),
        "topic nope does not exist",
    );
    fails_with(
        &group(
            &s,
            &[
                "reset-offsets",
                "--group",
                "x",
                "--topic",
                "t:4",
                "--to-earliest",
            ],
        ),
        "partition 4 of topic t does not exist",
    );
    fails_with(
        &group(
            &s,
            &[
                "reset-offsets",
                "--group",
                "x",
                "--topic",
                "t",
                "--shift-by",
                "1",
            ],
        ),
        "no committed offset",
    );
    fails_with(
        &group(
            &s,
            &[
                "reset-offsets",
                "--group",
                "x",
                "--all-topics",
                "--to-latest",
            ],
        ),
        "no committed offsets",
    );
    for args in [
        vec!["reset-offsets", "--group", "x", "--topic", "t"],
        vec!["reset-offsets", "--group", "x", "--to-earliest"],
        vec![
            "reset-offsets",
            "--group",
            "x",
            "--topic",
            "t",
            "--to-earliest",
            "--to-latest",
        ],
        vec![
            "reset-offsets",
            "--group",
            "x",
            "--topic",
            "t",
            "--all-topics",
            "--to-earliest",
        ],
        vec![
            "reset-offsets",
            "--group",
            "x",
            "--topic",
            "t",
            "--to-earliest",
            "--dry-run",
            "--execute",
        ],
        vec![
            "reset-offsets",
            "--group",
            "x",
            "--topic",
            "t",
            "--to-datetime",
            "yesterday",
        ],
        vec![
            "reset-offsets",
            "--group",
            "x",
            "--topic",
            "t:a",
            "--to-earliest",
        ],
        vec!["describe"],
        vec!["delete"],
        vec!["frobnicate"],
    ] {
        let o = group(&s, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).starts_with("error:"), "{args:?}: {}", stderr(&o));
    }
    let closed = format!("127.0.0.1:{}", free_port());
    fails_with(
        &sluice(&[
            "group",
            "--bootstrap-server",
            &closed,
            "--timeout-ms",
            "300",
            "list",
        ]),
        "cannot connect to",
    );
    ok(&sluice(&["group", "--help"]));
    ok(&sluice(&["group", "reset-offsets", "--help"]));
}
