//! Three `sluice server --config server-N.properties` processes forming one
//! cluster (combined broker and controller nodes, as scripts/cluster3.sh
//! starts them) on free 127.0.0.1 ports, for the multi-process failover
//! tests. Each node can be SIGKILLed, restarted on its folder, SIGSTOPped
//! and SIGCONTed, always by its own PID. Dropping the cluster kills every
//! node still running, so a panicking test leaves no process behind; a
//! panicking test also prints the tail of each node's log.

#![allow(dead_code)]

use std::fs;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, BIN};

/// One node's ports, files and (when running) process.
pub struct Node {
    pub id: i32,
    /// `127.0.0.1:PORT` of its PLAINTEXT listener.
    pub addr: String,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

impl Node {
    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

/// Three combined nodes (ids 1 to 3) of one metadata quorum.
pub struct Cluster3 {
    pub nodes: Vec<Node>,
    dir: tempfile::TempDir,
}

impl Cluster3 {
    /// Writes the three server.properties files (Kafka's keys, plus
    /// `extra` lines for every node) and starts the nodes; returns once
    /// every node listens.
    pub fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let brokers: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let controllers: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let voters = controllers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::new();
        for i in 0..3 {
            let id = i as i32 + 1;
            let config = dir.path().join(format!("server-{id}.properties"));
            let mut text = format!(
                "process.roles=broker,controller\n\
                 node.id={id}\n\
                 controller.quorum.voters={voters}\n\
                 listeners=PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}\n\
                 controller.listener.names=CONTROLLER\n\
                 log.dirs={}\n",
                brokers[i],
                controllers[i],
                dir.path().join(format!("data-{id}")).display()
            );
            for line in extra {
                text.push_str(line);
                text.push('\n');
            }
            fs::write(&config, text).unwrap_or_else(|e| panic!("write config: {e}"));
            nodes.push(Node {
                id,
                addr: format!("127.0.0.1:{}", brokers[i]),
                config,
                log: dir.path().join(format!("node-{id}.log")),
                child: None,
                stopped: false,
            });
        }
        let mut cluster = Cluster3 { nodes, dir };
        for id in 1..=3 {
            cluster.spawn(id);
        }
        for id in 1..=3 {
            cluster.wait_listening(id);
        }
        cluster
    }

    /// The comma-separated PLAINTEXT addresses of all nodes.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.addr.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn node(&self, id: i32) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: i32) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    fn spawn(&mut self, id: i32) {
        let node = self.node_mut(id);
        assert!(node.child.is_none(), "node {id} is running already");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .unwrap_or_else(|e| panic!("open log: {e}"));
        let err = log.try_clone().unwrap_or_else(|e| panic!("clone log: {e}"));
        let child = Command::new(BIN)
            .arg("server")
            .arg("--config")
            .arg(&node.config)
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start node {id}: {e}"));
        node.child = Some(child);
        node.stopped = false;
    }

    /// Waits (up to 30 s) until node `id` accepts connections.
    pub fn wait_listening(&self, id: i32) {
        let addr = &self.node(id).addr;
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "node {id} did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILLs node `id` (by its PID) and reaps it.
    pub fn kill(&mut self, id: i32) {
        let node = self.node_mut(id);
        let mut child = node
            .child
            .take()
            .unwrap_or_else(|| panic!("node {id} not running"));
        if node.stopped {
            signal(child.id(), "CONT");
            node.stopped = false;
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts node `id` again on its folder and waits until it listens.
    pub fn restart(&mut self, id: i32) {
        self.spawn(id);
        self.wait_listening(id);
    }

    /// SIGSTOPs node `id`.
    pub fn pause(&mut self, id: i32) {
        let node = self.node_mut(id);
        let pid = node
            .pid()
            .unwrap_or_else(|| panic!("node {id} not running"));
        signal(pid, "STOP");
        node.stopped = true;
    }

    /// SIGCONTs node `id`.
    pub fn resume(&mut self, id: i32) {
        let node = self.node_mut(id);
        let pid = node
            .pid()
            .unwrap_or_else(|| panic!("node {id} not running"));
        signal(pid, "CONT");
        node.stopped = false;
    }

    /// The last `lines` lines of node `id`'s log.
    pub fn log_tail(&self, id: i32, lines: usize) -> String {
        let text = fs::read_to_string(&self.node(id).log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Where the files and data live.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for Cluster3 {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking && std::env::var_os("SLUICE_TEST_STACKS").is_some() {
            // Debugging aid: every thread's stack of each running node.
            for node in &self.nodes {
                if let Some(pid) = node.pid() {
                    let out = Command::new("gdb")
                        .args([
                            "-p",
                            &pid.to_string(),
                            "-batch",
                            "-ex",
                            "thread apply all bt",
                        ])
                        .output();
                    if let Ok(out) = out {
                        eprintln!(
                            "---- node {} stacks ----\n{}",
                            node.id,
                            String::from_utf8_lossy(&out.stdout)
                        );
                    }
                }
            }
        }
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                if node.stopped {
                    signal(child.id(), "CONT");
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if let Some(keep) = std::env::var_os("SLUICE_TEST_LOG_DIR").filter(|_| panicking) {
            // Debugging aid: the whole logs of a failed run.
            let keep = std::path::PathBuf::from(keep);
            let _ = fs::create_dir_all(&keep);
            for node in &self.nodes {
                let _ = fs::copy(&node.log, keep.join(format!("node-{}.log", node.id)));
            }
            eprintln!("node logs copied to {}", keep.display());
        }
        if panicking || std::env::var_os("SLUICE_TEST_SHOW_LOGS").is_some() {
            for id in 1..=3 {
                eprintln!(
                    "---- node {id} log (last 60 lines) ----\n{}",
                    self.log_tail(id, 60)
                );
            }
        }
    }
}

/// Sends SIG`name` to process `pid` with kill(1).
fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
    assert!(status.success(), "kill -{name} {pid} failed");
}
