//! `sluice consume` against a real `sluice server` started from the same
//! binary: `--from-beginning`/`--max-messages`, `--partition`/`--offset`,
//! `--json`, `--format`, group commits between runs, SIGINT and a closed
//! stdout, and the error exits.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    create_topic, fails_with, free_port, ok, produce_keyed, sluice, start_server, stderr, stdout,
    Server, BIN,
};

fn lines(prefix: &str, range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("k{i}:{prefix}{i}")).collect()
}

fn consume(server: &Server, args: &[&str]) -> Output {
    let mut all = vec!["consume", "--bootstrap-server", server.addr.as_str()];
    all.extend_from_slice(args);
    sluice(&all)
}

fn out_lines(o: &Output) -> Vec<String> {
    ok(o).lines().map(str::to_string).collect()
}

/// A `sluice` child killed by its PID on drop.
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn send_sigint(child: &Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
    assert!(status.success());
}

/// Waits up to `secs` for the child to exit.
fn wait_exit(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap_or_else(|e| panic!("try_wait: {e}")) {
            return s;
        }
        assert!(Instant::now() < deadline, "sluice consume did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn from_beginning_and_max_messages() {
    let s = start_server();
    create_topic(&s, "events", 1);
    produce_keyed(&s, "events", 0, &lines("v", 0..5), &[]);
    let o = consume(
        &s,
        &[
            "--topic",
            "events",
            "--from-beginning",
            "--max-messages",
            "3",
        ],
    );
    assert_eq!(out_lines(&o), ["v0", "v1", "v2"]);
    assert!(
        stderr(&o).contains("Processed a total of 3 messages"),
        "{}",
        stderr(&o)
    );
    // --print-key with a custom separator.
    let o = consume(
        &s,
        &[
            "--topic",
            "events",
            "--from-beginning",
            "--max-messages",
            "2",
            "--print-key",
            "--key-separator",
            " => ",
        ],
    );
    assert_eq!(out_lines(&o), ["k0 => v0", "k1 => v1"]);
    // Default start is the end: nothing arrives before the idle timeout.
    let o = consume(&s, &["--topic", "events", "--idle-timeout-ms", "1000"]);
    assert_eq!(ok(&o), "");
}

#[test]
fn partition_and_offset() {
    let s = start_server();
    create_topic(&s, "two", 2);
    produce_keyed(&s, "two", 0, &lines("a", 0..5), &[]);
    produce_keyed(&s, "two", 1, &lines("b", 0..5), &[]);
    let o = consume(
        &s,
        &[
            "--topic",
            "two",
            "--partition",
            "1",
            "--offset",
            "2",
            "--max-messages",
            "3",
        ],
    );
    assert_eq!(out_lines(&o), ["b2", "b3", "b4"]);
    let o = consume(
        &s,
        &[
            "--topic",
            "two",
            "--partition",
            "0",
            "--offset",
            "earliest",
            "--idle-timeout-ms",
            "1500",
        ],
    );
    assert_eq!(out_lines(&o), ["a0", "a1", "a2", "a3", "a4"]);
    let o = consume(
        &s,
        &[
            "--topic",
            "two",
            "--partition",
            "0",
            "--offset",
            "latest",
            "--idle-timeout-ms",
            "1000",
        ],
    );
    assert_eq!(ok(&o), "");
    // Without --partition: every partition.
    let o = consume(
        &s,
        &["--topic", "two", "--from-beginning", "--max-messages", "10"],
    );
    let mut got = out_lines(&o);
    got.sort();
    let mut want: Vec<String> = (0..5).map(|i| format!("a{i}")).collect();
    want.extend((0..5).map(|i| format!("b{i}")));
    assert_eq!(got, want);
    // A partition the topic does not have.
    fails_with(
        &consume(&s, &["--topic", "two", "--partition", "5"]),
        "partition 5 of topic two does not exist",
    );
}

#[test]
fn json_output() {
    let s = start_server();
    create_topic(&s, "j", 1);
    produce_keyed(
        &s,
        "j",
        0,
        &["key-1:va\"l\\ue\tx".to_string(), "key-2:second".to_string()],
        &["h1=x", "h2=y"],
    );
    let o = consume(
        &s,
        &[
            "--topic",
            "j",
            "--from-beginning",
            "--max-messages",
            "2",
            "--json",
        ],
    );
    let got = out_lines(&o);
    assert_eq!(got.len(), 2, "{got:?}");
    for (i, line) in got.iter().enumerate() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON {line}: {e}"));
        assert_eq!(v["topic"], "j");
        assert_eq!(v["partition"], 0);
        assert_eq!(v["offset"], i as u64);
        assert!(v["timestamp"]
            .as_i64()
            .is_some_and(|t| t > 1_600_000_000_000));
        assert_eq!(v["timestamp_type"], "CreateTime");
        assert_eq!(v["key"], format!("key-{}", i + 1));
        let headers = v["headers"]
            .as_array()
            .unwrap_or_else(|| panic!("no headers: {line}"));
        assert_eq!(headers.len(), 2, "{line}");
        assert_eq!(headers[0]["key"], "h1");
        assert_eq!(headers[0]["value"], "x");
        assert_eq!(headers[1]["key"], "h2");
        assert_eq!(headers[1]["value"], "y");
    }
    let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap_or_default();
    assert_eq!(v["value"], "va\"l\\ue\tx");
}

#[test]
fn format_template() {
    let s = start_server();
    create_topic(&s, "f", 1);
    produce_keyed(&s, "f", 0, &lines("val", 0..3), &["src=test"]);
    let o = consume(
        &s,
        &[
            "--topic",
            "f",
            "--from-beginning",
            "--max-messages",
            "3",
            "--format",
            "%t|%p|%o|%k|%v|%h|%K|%S|100%%",
        ],
    );
    assert_eq!(
        out_lines(&o),
        [
            "f|0|0|k0|val0|src=test|2|4|100%",
            "f|0|1|k1|val1|src=test|2|4|100%",
            "f|0|2|k2|val2|src=test|2|4|100%",
        ]
    );
    let o = consume(
        &s,
        &[
            "--topic",
            "f",
            "--from-beginning",
            "--max-messages",
            "1",
            "--format",
            "%T\\t%v",
        ],
    );
    let out = ok(&o);
    let (ts, v) = out
        .trim_end()
        .split_once('\t')
        .unwrap_or_else(|| panic!("no tab in {out:?}"));
    assert!(
        ts.parse::<i64>().is_ok_and(|t| t > 1_600_000_000_000),
        "{out}"
    );
    assert_eq!(v, "val0");
}

#[test]
fn group_commits_between_runs() {
    let s = start_server();
    create_topic(&s, "g", 2);
    produce_keyed(&s, "g", 0, &lines("a", 0..3), &[]);
    produce_keyed(&s, "g", 1, &lines("b", 0..3), &[]);
    let args = [
        "--topic",
        "g",
        "--group",
        "readers",
        "--from-beginning",
        "--max-messages",
    ];
    let run = |n: &str| {
        let mut a = args.to_vec();
        a.push(n);
        let mut got = out_lines(&consume(&s, &a));
        got.sort();
        got
    };
    assert_eq!(run("6"), ["a0", "a1", "a2", "b0", "b1", "b2"]);
    produce_keyed(&s, "g", 0, &lines("a", 3..5), &[]);
    produce_keyed(&s, "g", 1, &lines("b", 3..4), &[]);
    // Stops after one record of the batch: the commit covers only that one.
    let first = run("1");
    assert_eq!(first.len(), 1);
    let mut rest = run("2");
    rest.extend(first);
    rest.sort();
    assert_eq!(rest, ["a3", "a4", "b3"]);
    // Nothing left for the group.
    let o = consume(
        &s,
        &[
            "--topic",
            "g",
            "--group",
            "readers",
            "--from-beginning",
            "--idle-timeout-ms",
            "1500",
        ],
    );
    assert_eq!(ok(&o), "");
}

#[test]
fn stops_on_sigint_and_closed_stdout() {
    let s = start_server();
    create_topic(&s, "big", 1);
    let big: Vec<String> = (0..3000).map(|i| format!("k:{i:0>100}")).collect();
    produce_keyed(&s, "big", 0, &big, &[]);

    // `| head -n 1`: the reader goes away; exit 0 quietly.
    let mut child = Bg(Command::new(BIN)
        .args(["consume", "--bootstrap-server", &s.addr, "--topic", "big"])
        .args(["--from-beginning", "--idle-timeout-ms", "20000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sluice: {e}")));
    {
        let pipe = child.0.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut first = String::new();
        BufReader::new(pipe)
            .read_line(&mut first)
            .unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(first.trim_end(), format!("{:0>100}", 0));
    }
    let status = wait_exit(&mut child.0, 15);
    let mut err = String::new();
    if let Some(mut e) = child.0.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "{status:?}: {err}");
    assert!(!err.contains("sluice:"), "{err}");
    let printed: u64 = err
        .trim()
        .strip_prefix("Processed a total of ")
        .and_then(|r| r.strip_suffix(" messages"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {err:?}"));
    assert!(printed < 3000, "{err}");

    // SIGINT: close and exit 0.
    let mut child = Bg(Command::new(BIN)
        .args(["consume", "--bootstrap-server", &s.addr, "--topic", "big"])
        .args(["--group", "sig"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sluice: {e}")));
    std::thread::sleep(Duration::from_millis(1500));
    send_sigint(&child.0);
    let status = wait_exit(&mut child.0, 15);
    assert!(status.success(), "{status:?}");
}

#[test]
fn error_exits() {
    let s = start_server();
    create_topic(&s, "t", 1);
    fails_with(
        &consume(&s, &["--topic", "missing", "--max-messages", "1"]),
        "topic missing does not exist",
    );
    fails_with(
        &consume(&s, &["--topic", "t", "--group", "g", "--partition", "0"]),
        "--partition cannot be used with --group",
    );
    fails_with(
        &consume(&s, &["--topic", "t", "--offset", "3"]),
        "--offset needs --partition",
    );
    fails_with(
        &consume(
            &s,
            &[
                "--topic",
                "t",
                "--partition",
                "0",
                "--offset",
                "2",
                "--from-beginning",
            ],
        ),
        "cannot be used together",
    );
    for (args, needle) in [
        (
            vec!["--topic", "t", "--partition", "0", "--offset", "soon"],
            "--offset",
        ),
        (
            vec!["--topic", "t", "--partition", "0", "--offset", "-4"],
            "--offset",
        ),
        (
            vec!["--topic", "t", "--format", "%v %x"],
            "unknown placeholder %x",
        ),
        (
            vec!["--topic", "t", "--isolation-level", "dirty"],
            "read_committed",
        ),
        (
            vec!["--topic", "t", "--json", "--format", "%v"],
            "cannot be used with",
        ),
        (vec!["--max-messages", "1"], "--topic"),
        (
            vec!["--topic", "t", "--group", "g", "--assignor", "fair"],
            "unknown assignor",
        ),
    ] {
        let o = consume(&s, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    let closed = format!("127.0.0.1:{}", free_port());
    fails_with(
        &sluice(&[
            "consume",
            "--bootstrap-server",
            &closed,
            "--timeout-ms",
            "300",
            "--topic",
            "t",
        ]),
        "cannot connect to",
    );
    let help = sluice(&["consume", "--help"]);
    let text = ok(&help);
    for flag in [
        "--from-beginning",
        "--group",
        "--format",
        "--json",
        "--idle-timeout-ms",
        "--assignor",
    ] {
        assert!(text.contains(flag), "{flag} not in {text}");
    }
    assert!(stdout(&help).contains("%k key"), "{}", stdout(&help));
}
