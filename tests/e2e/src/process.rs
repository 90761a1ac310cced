//! Spawned `lakestream serve` processes: started from a generated configuration, ready once
//! `/readyz` answers 200, stopped by PID (SIGKILL for a crash, SIGTERM for a graceful stop),
//! restarted on the same port, data and S3 prefix. Each start logs to its own file at info
//! level; the suites count log lines in them (compaction steps, failures).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::ServiceConfig;
use crate::{Error, Result};

/// The `lakestream` binary: `LAKESTREAM_BIN`, else the one cargo built next to this test
/// executable (`target/<profile>/lakestream`), else under `$CARGO_TARGET_DIR/debug`.
pub fn lakestream_bin() -> Result<PathBuf> {
    if let Ok(bin) = std::env::var("LAKESTREAM_BIN") {
        let path = PathBuf::from(&bin);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::new(format!("LAKESTREAM_BIN={bin:?} is not a file")))
        };
    }
    let mut tried = Vec::new();
    // A test executable lives in target/<profile>/deps/; cargo puts binaries one level up.
    if let Ok(exe) = std::env::current_exe()
        && let Some(profile_dir) = exe.parent().and_then(Path::parent)
    {
        tried.push(profile_dir.join("lakestream"));
    }
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        tried.push(Path::new(&dir).join("debug").join("lakestream"));
    }
    tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        Error::new(format!(
            "the lakestream binary is not built (looked at {tried:?}): run `cargo build -p lakestream-cli` \
             first (scripts/test does), or set LAKESTREAM_BIN"
        ))
    })
}

/// A free TCP port on 127.0.0.1 (free when asked; the service binds it moments later), below
/// the ephemeral range where outgoing connections could take it meanwhile.
pub fn free_port() -> Result<u16> {
    Ok(lakestream_meta_oxia::testkit::loopback_port())
}

/// A spawned service process.
#[derive(Debug)]
pub struct Service {
    name: String,
    bin: PathBuf,
    dir: PathBuf,
    config_path: PathBuf,
    port: u16,
    child: Option<Child>,
    logs: Vec<PathBuf>,
}

impl Service {
    /// Writes `config` to `dir/<name>.toml`, starts the service and waits until it is ready.
    pub async fn start(name: &str, dir: &Path, config: &ServiceConfig) -> Result<Service> {
        let config_path = dir.join(format!("{name}.toml"));
        std::fs::write(&config_path, config.to_toml())
            .map_err(|e| Error::new(format!("cannot write {}: {e}", config_path.display())))?;
        let mut service = Service {
            name: name.to_string(),
            bin: lakestream_bin()?,
            dir: dir.to_path_buf(),
            config_path,
            port: config.http_port,
            child: None,
            logs: Vec::new(),
        };
        service.spawn_and_wait().await?;
        Ok(service)
    }

    /// The base URL of its HTTP API.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its name in messages and log file names.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The PID of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// How many times it was started.
    pub fn starts(&self) -> usize {
        self.logs.len()
    }

    async fn spawn_and_wait(&mut self) -> Result<()> {
        let log_path = self.dir.join(format!("{}.{}.log", self.name, self.logs.len() + 1));
        let log = File::create(&log_path)
            .map_err(|e| Error::new(format!("cannot create {}: {e}", log_path.display())))?;
        let log2 = log.try_clone().map_err(|e| Error::new(e.to_string()))?;
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg("--config")
            .arg(&self.config_path)
            .current_dir(&self.dir)
            // The generated file is the whole configuration: no variable of the caller's
            // shell may override it.
            .env_remove("LAKESTREAM_HTTP_ADDR")
            .env_remove("LAKESTREAM_OXIA_ADDRESSES")
            .env("RUST_LOG", std::env::var("LAKESTREAM_E2E_RUST_LOG").unwrap_or_else(|_| "info".into()))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .map_err(|e| Error::new(format!("cannot start {}: {e}", self.bin.display())))?;
        self.logs.push(log_path);
        self.child = Some(child);
        self.wait_ready(Duration::from_secs(60)).await
    }

    /// Waits until `/readyz` answers 200; fails early, with the log's tail, if the process
    /// exits.
    async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(Error::new(format!(
                    "{} exited before it was ready ({status}); its log ends:\n{}",
                    self.name,
                    self.log_tail(40)
                )));
            }
            if readyz(self.port).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::new(format!(
                    "{} was not ready within {timeout:?}; its log ends:\n{}",
                    self.name,
                    self.log_tail(40)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL (kill -9): the process gets no chance to flush or release anything.
    pub fn kill9(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().map_err(|e| Error::new(format!("cannot kill {}: {e}", self.name)))?;
            child.wait().map_err(|e| Error::new(format!("cannot reap {}: {e}", self.name)))?;
        }
        Ok(())
    }

    /// SIGTERM and wait for the exit (graceful shutdown); SIGKILL after `timeout`.
    pub async fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            return Err(Error::new(format!("{} is not running", self.name)));
        };
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .map_err(|e| Error::new(format!("cannot run kill: {e}")))?;
        if !sent.success() {
            return Err(Error::new(format!("kill -TERM {} failed: {sent}", child.id())));
        }
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::new(format!(
                        "{} did not exit within {timeout:?} of SIGTERM; its log ends:\n{}",
                        self.name,
                        self.log_tail(40)
                    )));
                }
            }
        }
    }

    /// Starts it again (same configuration, port and data) and waits until it is ready.
    pub async fn restart(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Err(Error::new(format!("{} is still running", self.name)));
        }
        self.spawn_and_wait().await
    }

    /// Resident memory of the running process, from `/proc/<pid>/status` (`VmRSS`).
    pub fn rss_bytes(&self) -> Option<u64> {
        rss_bytes(self.pid()?)
    }

    /// Every log line of every start, in order.
    pub fn log_text(&self) -> String {
        self.logs.iter().filter_map(|p| std::fs::read_to_string(p).ok()).collect::<Vec<_>>().join("")
    }

    /// How many log lines (of every start) contain `needle`.
    pub fn count_in_logs(&self, needle: &str) -> usize {
        self.log_text().lines().filter(|l| l.contains(needle)).count()
    }

    /// Log lines (of every start) that report a panic: a panic is a bug whatever the fault,
    /// so the suites fail on one.
    pub fn panics(&self) -> Vec<String> {
        panic_lines(&self.log_text())
    }

    /// The last `n` lines of the current start's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.logs.last().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The lines of `text` that report a panic (Rust's "panicked at", a Go runtime's "panic:").
pub fn panic_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("panicked at") || l.starts_with("panic: ") || l.starts_with("fatal error: "))
        .map(str::to_owned)
        .collect()
}

/// `VmRSS` of a process in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.trim_start_matches("VmRSS:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// True when `GET /readyz` on the port answers 200.
async fn readyz(port: u16) -> bool {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.ok()?;
        let mut response = Vec::new();
        s.read_to_end(&mut response).await.ok()?;
        Some(response.starts_with(b"HTTP/1.1 200"))
    };
    matches!(tokio::time::timeout(Duration::from_secs(2), attempt).await, Ok(Some(true)))
}

/// Compaction steps the service logged: what its log lines show happened, as counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionLog {
    /// Ranges whose C3 (install), C4 (retire) and C5 (progress) completed: the compactor logs
    /// "compacted a range" after C5. It logs no line per step, so a kill between C3 and C4
    /// shows only as a range that is repaired after the restart (not logged either).
    pub ranges_compacted: usize,
    /// Failed C3/C4 attempts that were repeated.
    pub install_retries: usize,
    /// Compactions of a log that failed (retried next pass).
    pub failed: usize,
    /// Reclamation passes that deleted something.
    pub reclamations: usize,
}

impl CompactionLog {
    /// Counts the lines of `text`.
    pub fn of(text: &str) -> Self {
        let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
        CompactionLog {
            ranges_compacted: count("compacted a range"),
            install_retries: count("C3/C4 attempt failed"),
            failed: count("compaction failed") + count("compaction of a log failed"),
            reclamations: count("reclamation pass"),
        }
    }
}

/// The highest offset (exclusive) each log reached in "compacted a range" lines.
pub fn compacted_ends(text: &str) -> std::collections::HashMap<u64, u64> {
    let mut ends = std::collections::HashMap::new();
    for line in text.lines().filter(|l| l.contains("compacted a range")) {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| v.trim_matches(|c: char| !c.is_ascii_digit()).parse::<u64>().ok())
        };
        if let (Some(log), Some(end)) = (field("log_id="), field("end=")) {
            let e = ends.entry(log).or_insert(0);
            *e = (*e).max(end);
        }
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        assert_eq!(parse_vm_rss("Name:\tx\nVmRSS:\t  12345 kB\nVmSwap: 0 kB\n"), Some(12345 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn panics_are_found_in_logs() {
        let log = "INFO fine\nthread 'tokio-runtime-worker' panicked at src/x.rs:1:2:\nboom\npanic: runtime error\n";
        assert_eq!(panic_lines(log).len(), 2);
        assert!(panic_lines("INFO a panic-free line\n").is_empty());
    }

    #[test]
    fn compaction_lines_are_counted_and_their_ends_read() {
        let log = "2026 INFO lakestream_compactor::compactor: compacted a range log_id=3 start=0 end=40 files=1\n\
                   2026 INFO lakestream_compactor::compactor: compacted a range log_id=3 start=40 end=95 files=1\n\
                   2026 WARN x: C3/C4 attempt failed; repeating log_id=3\n";
        let c = CompactionLog::of(log);
        assert_eq!((c.ranges_compacted, c.install_retries, c.failed), (2, 1, 0));
        assert_eq!(compacted_ends(log).get(&3), Some(&95));
    }
}
