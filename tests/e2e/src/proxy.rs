//! A TCP proxy on loopback that resets connections at random: put between a service and its
//! S3 server, it makes requests die mid-upload or mid-response, as a flaky network does.
//!
//! Each accepted connection is, with probability `reset_probability`, given a byte budget
//! drawn from `[0, max_bytes_before_reset]`; once that many bytes have passed (either way) both
//! sides are closed with a TCP reset (`SO_LINGER` 0). The other connections pass untouched.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::history::History;
use crate::rng::Rng;

/// What the proxy does to connections.
#[derive(Debug, Clone, Copy)]
pub struct ProxyConfig {
    /// The share of connections that get reset.
    pub reset_probability: f64,
    /// The most bytes a doomed connection carries before its reset.
    pub max_bytes_before_reset: u64,
    /// The seed of the decisions.
    pub seed: u64,
}

/// Counts of what the proxy did.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections reset.
    pub resets: AtomicU64,
    /// Bytes passed.
    pub bytes: AtomicU64,
}

/// A running proxy; stops accepting when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    stats: Arc<ProxyStats>,
    enabled: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: String, config: ProxyConfig) -> std::io::Result<FaultProxy> {
        Self::start_recording(upstream, config, None).await
    }

    /// As [`FaultProxy::start`], recording each reset in `history` as a fault named `fault`.
    pub async fn start_recording(
        upstream: String,
        config: ProxyConfig,
        history: Option<(History, &'static str)>,
    ) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(ProxyStats::default());
        let enabled = Arc::new(AtomicBool::new(true));
        let (s, on) = (stats.clone(), enabled.clone());
        let task = tokio::spawn(async move {
            let rng = Rng::new(config.seed);
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                s.connections.fetch_add(1, Ordering::Relaxed);
                let budget = (on.load(Ordering::Relaxed) && rng.chance(config.reset_probability))
                    .then(|| rng.between(0, config.max_bytes_before_reset));
                let (s, upstream, history) = (s.clone(), upstream.clone(), history.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await
                        && pipe(client, server, budget, &s).await
                        && let Some((history, fault)) = history
                    {
                        history.fault(fault);
                    }
                });
            }
        });
        Ok(FaultProxy { addr, stats, enabled, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it did so far.
    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }

    /// Turns resets of new connections on or off (the final verification runs without).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies both ways until either side closes, or resets both once `budget` bytes passed;
/// true when it reset them.
async fn pipe(mut a: TcpStream, mut b: TcpStream, budget: Option<u64>, stats: &ProxyStats) -> bool {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let mut passed = 0u64;
    let (mut buf_a, mut buf_b) = (vec![0u8; 16 << 10], vec![0u8; 16 << 10]);
    loop {
        // Which way the bytes go this round: from a to b, or back.
        let (n, a_to_b) = tokio::select! {
            r = a.read(&mut buf_a) => (r.unwrap_or(0), true),
            r = b.read(&mut buf_b) => (r.unwrap_or(0), false),
        };
        if n == 0 {
            return false; // one side closed: dropping both closes the other
        }
        let mut take = n;
        let mut reset = false;
        if let Some(limit) = budget
            && passed + n as u64 >= limit
        {
            take = (limit - passed.min(limit)) as usize;
            reset = true;
        }
        let (from, to) = if a_to_b { (&buf_a, &mut b) } else { (&buf_b, &mut a) };
        if to.write_all(&from[..take]).await.is_err() {
            return false;
        }
        passed += take as u64;
        stats.bytes.fetch_add(take as u64, Ordering::Relaxed);
        if reset {
            stats.resets.fetch_add(1, Ordering::Relaxed);
            let _ = a.set_zero_linger();
            let _ = b.set_zero_linger();
            return true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(proxy: &FaultProxy, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(proxy.addr).await?;
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
            .await
            .map_err(|_| std::io::Error::other("timeout"))??;
        Ok(got)
    }

    #[tokio::test]
    async fn connections_pass_or_are_reset_as_configured() {
        let upstream = echo_server().await.to_string();
        let clean = FaultProxy::start(
            upstream.clone(),
            ProxyConfig { reset_probability: 0.0, max_bytes_before_reset: 0, seed: 1 },
        )
        .await
        .unwrap();
        assert_eq!(round_trip(&clean, b"hello").await.unwrap(), b"hello");
        let doomed = FaultProxy::start(
            upstream,
            ProxyConfig { reset_probability: 1.0, max_bytes_before_reset: 3, seed: 1 },
        )
        .await
        .unwrap();
        assert!(round_trip(&doomed, b"hello, world").await.is_err());
        assert_eq!(doomed.stats().resets.load(Ordering::Relaxed), 1);
        doomed.set_enabled(false);
        assert_eq!(round_trip(&doomed, b"hello").await.unwrap(), b"hello");
    }
}
