//! Shared by the CLI integration tests: a `sluice server` child on a free
//! port (killed by its PID on drop), running the `sluice` binary, and
//! assertions on its output.

#![allow(dead_code)]

use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// A `sluice server` child process, killed (by its own PID) on drop.
pub struct Server {
    child: Child,
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port on 127.0.0.1, below the ephemeral range (so a server
/// restarted on its port finds it free).
pub use sluice_testkit::free_port;

pub fn start_server() -> Server {
    start_server_with(&[])
}

/// A server started with extra `sluice server` arguments (e.g.
/// `--override KEY=VALUE`).
pub fn start_server_with(extra: &[&str]) -> Server {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let data = dir.path().join("data");
    let child = Command::new(BIN)
        .arg("server")
        .arg("--data-dir")
        .arg(&data)
        .arg("--listeners")
        .arg(format!("PLAINTEXT://{addr}"))
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start sluice server: {e}"));
    let server = Server {
        child,
        addr,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&server.addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "server did not listen on {}",
            server.addr
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

pub fn sluice(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("cannot run sluice: {e}"))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "expected success, got {:?}\nstdout: {}\nstderr: {}",
        o.status,
        stdout(o),
        stderr(o)
    );
    stdout(o)
}

/// Asserts a failure reported as one `sluice: ...` line containing `needle`.
#[track_caller]
pub fn fails_with(o: &Output, needle: &str) {
    assert!(
        !o.status.success(),
        "expected failure, got success: {}",
        stdout(o)
    );
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {err}");
    assert!(lines[0].starts_with("sluice: "), "bad error line: {err}");
    assert!(err.contains(needle), "{needle:?} not in: {err}");
}

/// Runs `sluice args...` with `input` on its stdin.
pub fn sluice_with_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sluice: {e}"));
    let mut stdin = child
        .stdin
        .take()
        .unwrap_or_else(|| panic!("no stdin pipe"));
    let input = input.to_vec();
    // Write from a thread: the child may exit (or fill its stdout) early.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot wait for sluice: {e}"));
    let _ = writer.join();
    out
}

/// `sluice topic create NAME --partitions N` on `server`.
pub fn create_topic(server: &Server, name: &str, partitions: u32) {
    ok(&sluice(&[
        "topic",
        "--bootstrap-server",
        &server.addr,
        "create",
        name,
        "--partitions",
        &partitions.to_string(),
    ]));
}

/// Whether kcat is installed (scripts/test.sh installs it); prints a skip
/// notice when it is not.
pub fn have_kcat(test: &str) -> bool {
    let found = Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("{test}: kcat not found, skipping the read-back checks");
    }
    found
}

/// Every record of `topic`, one line each in kcat's `-f FORMAT` (which
/// must end in `\n`), read from the beginning to the current end.
pub fn kcat_read(server: &Server, topic: &str, format: &str) -> Vec<String> {
    let out = Command::new("kcat")
        .args([
            "-C",
            "-q",
            "-e",
            "-b",
            &server.addr,
            "-t",
            topic,
            "-f",
            format,
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run kcat: {e}"));
    assert!(
        out.status.success(),
        "kcat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Produces `KEY:VALUE` lines to one partition (kcat when installed, else
/// `sluice produce`), with `headers` (`K=V`) on every record.
pub fn produce_keyed(
    server: &Server,
    topic: &str,
    partition: i32,
    lines: &[String],
    headers: &[&str],
) {
    let mut input = lines.join("\n");
    input.push('\n');
    let kcat = Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let out = if kcat {
        let mut cmd = Command::new("kcat");
        cmd.args(["-P", "-b", &server.addr, "-t", topic, "-K", ":"])
            .args(["-p", &partition.to_string()]);
        for h in headers {
            cmd.args(["-H", h]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run kcat: {e}"));
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
            stdin
                .write_all(input.as_bytes())
                .unwrap_or_else(|e| panic!("write to kcat: {e}"));
        }
        child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("wait for kcat: {e}"))
    } else {
        let p = partition.to_string();
        let mut args = vec![
            "produce",
            "--bootstrap-server",
            server.addr.as_str(),
            "--topic",
            topic,
            "--partition",
            &p,
            "--key-separator",
            ":",
        ];
        for h in headers {
            args.extend_from_slice(&["--header", h]);
        }
        sluice_with_stdin(&args, input.as_bytes())
    };
    assert!(
        out.status.success(),
        "producing failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
pub mod cluster;
