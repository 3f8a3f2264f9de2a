//! `sluice perf loopback` and `sluice perf disk`: what the machine itself
//! can do, measured the way the broker moves bytes, so the benchmark runner
//! (`scripts/bench.py`) can put Sluice's figures next to them.
//!
//! - loopback: one thread writes `--bytes` over a TCP connection on
//!   127.0.0.1 in `--chunk` writes, another reads them into one reused
//!   buffer (the socket copies a broker and a client cannot avoid);
//! - disk: sequential `--chunk` writes of `--bytes` into a new file in
//!   `--dir` (the broker's data folder), with `fdatasync` at the end when
//!   `--fdatasync` is given; the file is removed afterwards.
//!
//! Both print MB/s (1024 × 1024 bytes, as the perf tools) and the CPU
//! seconds the process spent per GB (10⁹ bytes; user and system time of all
//! its threads, from `/proc/self/stat`: the kernel's own cost of moving the
//! bytes, a floor for the broker's CPU per GB) in text or, with `--json`,
//! one JSON object.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};

use super::MB;

/// `sluice perf loopback`.
#[derive(Debug, clap::Args)]
pub struct LoopbackArgs {
    /// Bytes to send.
    #[arg(long, value_name = "BYTES", default_value_t = 2 << 30, value_parser = clap::value_parser!(u64).range(1..))]
    bytes: u64,
    /// Size of each write (and of the reader's buffer).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1..=(1 << 30)))]
    chunk: u64,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

/// `sluice perf disk`.
#[derive(Debug, clap::Args)]
pub struct DiskArgs {
    /// Folder to write in (e.g. the broker's data folder).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Bytes to write.
    #[arg(long, value_name = "BYTES", default_value_t = 2 << 30, value_parser = clap::value_parser!(u64).range(1..))]
    bytes: u64,
    /// Size of each write.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1..=(1 << 30)))]
    chunk: u64,
    /// Call fdatasync once at the end (counted in the time).
    #[arg(long)]
    fdatasync: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

/// One measurement: bytes moved in seconds, with the CPU seconds the
/// process spent meanwhile (when `/proc` tells).
struct Rate {
    what: &'static str,
    bytes: u64,
    seconds: f64,
    cpu_seconds: Option<f64>,
}

impl Rate {
    fn print(&self, json: bool) {
        let mb_s = self.bytes as f64 / MB / self.seconds.max(1e-9);
        let per_gb = self
            .cpu_seconds
            .map(|c| c / (self.bytes as f64 / 1e9).max(1e-9));
        if json {
            let cpu = match (self.cpu_seconds, per_gb) {
                (Some(c), Some(g)) => format!(",\"cpu_seconds\":{c:.3},\"cpu_s_per_gb\":{g:.3}"),
                _ => String::new(),
            };
            println!(
                "{{\"what\":\"{}\",\"bytes\":{},\"seconds\":{:.6},\"mb_per_sec\":{:.2}{cpu}}}",
                self.what, self.bytes, self.seconds, mb_s
            );
        } else {
            let cpu = per_gb.map_or(String::new(), |g| format!(", {g:.3} CPU-s/GB"));
            println!(
                "{}: {} bytes in {:.3} s, {:.2} MB/sec{cpu}",
                self.what, self.bytes, self.seconds, mb_s
            );
        }
    }
}

/// User plus system CPU seconds of this process so far (all threads), from
/// `/proc/self/stat` (fields 14 and 15, in the kernel's 100 Hz ticks).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces: count after its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// CPU seconds spent since `before` (a [`cpu_seconds`] reading).
fn cpu_since(before: Option<f64>) -> Option<f64> {
    Some(cpu_seconds()? - before?)
}

/// Runs `sluice perf loopback`.
pub fn loopback(args: &LoopbackArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot listen on 127.0.0.1")?;
    let addr = listener.local_addr()?;
    let chunk = args.chunk as usize;
    let total = args.bytes;
    let reader = std::thread::spawn(move || -> anyhow::Result<u64> {
        let (mut s, _) = listener.accept().context("accept")?;
        let mut buf = vec![0u8; chunk];
        let mut got = 0u64;
        loop {
            let n = s.read(&mut buf).context("read")?;
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        Ok(got)
    });
    let buf = pattern(chunk);
    let cpu = cpu_seconds();
    let start = Instant::now();
    {
        let mut s = TcpStream::connect(addr).context("connect")?;
        s.set_nodelay(true)?;
        let mut left = total;
        while left > 0 {
            let n = left.min(chunk as u64) as usize;
            s.write_all(&buf[..n]).context("write")?;
            left -= n as u64;
        }
    }
    let got = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the reader thread panicked"))??;
    let seconds = start.elapsed().as_secs_f64();
    if got != total {
        bail!("sent {total} bytes but {got} arrived");
    }
    Rate {
        what: "loopback",
        bytes: total,
        seconds,
        cpu_seconds: cpu_since(cpu),
    }
    .print(args.json);
    Ok(())
}

/// Runs `sluice perf disk`.
pub fn disk(args: &DiskArgs) -> anyhow::Result<()> {
    if !args.dir.is_dir() {
        bail!("--dir {}: not a folder", args.dir.display());
    }
    let path = args
        .dir
        .join(format!(".sluice-perf-disk-{}", std::process::id()));
    let cpu = cpu_seconds();
    let result = write_file(&path, args);
    let cpu = cpu_since(cpu);
    let _ = std::fs::remove_file(&path);
    let seconds = result?;
    Rate {
        what: if args.fdatasync {
            "disk write + fdatasync"
        } else {
            "disk write"
        },
        bytes: args.bytes,
        seconds,
        cpu_seconds: cpu,
    }
    .print(args.json);
    Ok(())
}

fn write_file(path: &std::path::Path, args: &DiskArgs) -> anyhow::Result<f64> {
    let buf = pattern(args.chunk as usize);
    let start = Instant::now();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut left = args.bytes;
    while left > 0 {
        let n = left.min(args.chunk) as usize;
        f.write_all(&buf[..n])
            .with_context(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    if args.fdatasync {
        f.sync_data()
            .with_context(|| format!("fdatasync {}", path.display()))?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Bytes that are not all zero (a file system may treat zeros specially).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'A' + (i % 26) as u8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_grow_with_work() {
        let before = cpu_seconds().expect("/proc/self/stat");
        let mut x = 0u64;
        let start = Instant::now();
        // Busy until the reading moves (at most 10 s, under any load).
        while cpu_since(Some(before)).expect("cpu") < 0.05 && start.elapsed().as_secs() < 10 {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        assert!(cpu_since(Some(before)).expect("cpu") >= 0.05);
    }

    #[test]
    fn disk_writes_and_removes_its_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let args = DiskArgs {
            dir: dir.path().to_path_buf(),
            bytes: 3 << 20,
            chunk: 1 << 20,
            fdatasync: true,
            json: true,
        };
        disk(&args).expect("disk");
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 0);
    }

    #[test]
    fn loopback_moves_every_byte() {
        let args = LoopbackArgs {
            bytes: (5 << 20) + 17,
            chunk: 1 << 20,
            json: false,
        };
        loopback(&args).expect("loopback");
    }
}
