//! `sluice perf loopback` and `sluice perf disk`: what the machine itself
//! can do, measured the way the broker moves bytes, so the benchmark runner
//! (`scripts/bench.py`) can put Sluice's figures next to them.
//!
//! - loopback: one thread writes `--bytes` over a TCP connection on
//!   127.0.0.1 in `--chunk` writes, another reads them into one reused
//!   buffer (the socket copies a broker and a client cannot avoid); with
//!   `--sendfile-dir`, the sender `sendfile(2)`s them from a file of the
//!   page cache instead, as the broker answers a fetch (the floor under a
//!   consumer's and its broker's CPU per GB);
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
    /// Send from a file: first write `--bytes` into a new file in this
    /// folder (e.g. the broker's data folder; not counted), then send it
    /// with sendfile(2), `--chunk` bytes per call, as the broker answers a
    /// fetch from the page cache. The file is removed afterwards.
    #[arg(long, value_name = "DIR")]
    sendfile_dir: Option<PathBuf>,
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
    let source = match &args.sendfile_dir {
        Some(dir) => Some(SourceFile::write(dir, args.bytes, args.chunk)?),
        None => None,
    };
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
    let cpu = cpu_seconds();
    let start = Instant::now();
    {
        let mut s = TcpStream::connect(addr).context("connect")?;
        s.set_nodelay(true)?;
        match &source {
            Some(file) => file.send(&s, chunk)?,
            None => write_repeated(&mut s, &pattern(chunk), total).context("write")?,
        }
    }
    let got = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the reader thread panicked"))??;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = cpu_since(cpu);
    drop(source);
    if got != total {
        bail!("sent {total} bytes but {got} arrived");
    }
    Rate {
        what: if args.sendfile_dir.is_some() {
            "loopback sendfile"
        } else {
            "loopback"
        },
        bytes: total,
        seconds,
        cpu_seconds,
    }
    .print(args.json);
    Ok(())
}

/// The file `sluice perf loopback --sendfile-dir` sends; removed when
/// dropped.
#[derive(Debug)]
struct SourceFile {
    path: PathBuf,
    file: std::fs::File,
    len: u64,
}

impl SourceFile {
    /// Writes `len` bytes into a new file in `dir` (left in the page cache).
    fn write(dir: &std::path::Path, len: u64, chunk: u64) -> anyhow::Result<Self> {
        if !dir.is_dir() {
            bail!("--sendfile-dir {}: not a folder", dir.display());
        }
        let path = dir.join(format!(".sluice-perf-sendfile-{}", std::process::id()));
        // Removed by `Drop` from here on, whatever fails.
        let mut this = Self {
            file: std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .with_context(|| format!("cannot create {}", path.display()))?,
            path,
            len,
        };
        write_repeated(&mut this.file, &pattern(chunk as usize), len)
            .with_context(|| format!("writing {}", this.path.display()))?;
        Ok(this)
    }

    /// Sends the whole file on `sock` with sendfile(2), at most `chunk`
    /// bytes per call.
    fn send(&self, sock: &TcpStream, chunk: usize) -> anyhow::Result<()> {
        use std::os::fd::AsRawFd;
        let mut offset: libc::off_t = 0;
        while (offset as u64) < self.len {
            let count = (self.len - offset as u64).min(chunk as u64) as usize;
            // SAFETY: both descriptors stay open for the call (borrowed
            // from `sock` and `self`), and `offset` is a valid, exclusive
            // `off_t` the kernel advances.
            let n = unsafe {
                libc::sendfile(sock.as_raw_fd(), self.file.as_raw_fd(), &mut offset, count)
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e).context("sendfile");
                }
            } else if n == 0 {
                bail!("sendfile stopped at byte {offset} of {}", self.len);
            }
        }
        Ok(())
    }
}

impl Drop for SourceFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
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
    write_repeated(&mut f, &buf, args.bytes)
        .with_context(|| format!("writing {}", path.display()))?;
    if args.fdatasync {
        f.sync_data()
            .with_context(|| format!("fdatasync {}", path.display()))?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Writes `len` bytes: `buf` over and over, one `buf` (or what is left) per
/// write.
fn write_repeated(w: &mut impl Write, buf: &[u8], len: u64) -> std::io::Result<()> {
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        w.write_all(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
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
            sendfile_dir: None,
            json: false,
        };
        loopback(&args).expect("loopback");
    }

    #[test]
    fn loopback_sendfile_moves_every_byte_and_removes_its_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let args = LoopbackArgs {
            bytes: (5 << 20) + 17,
            chunk: 1 << 20,
            sendfile_dir: Some(dir.path().to_path_buf()),
            json: true,
        };
        loopback(&args).expect("loopback");
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 0);
    }

    #[test]
    fn loopback_sendfile_names_a_missing_folder() {
        let args = LoopbackArgs {
            bytes: 1 << 20,
            chunk: 1 << 20,
            sendfile_dir: Some(PathBuf::from("/nonexistent/sluice-perf")),
            json: true,
        };
        let e = loopback(&args).expect_err("missing folder");
        assert!(
            e.to_string()
                .contains("--sendfile-dir /nonexistent/sluice-perf"),
            "{e}"
        );
    }
}
