//! Per-client request rate limits: a token bucket per client, where a client is the bearer
//! token's name when authentication is on, else the peer's IP address. Both APIs share one
//! limiter, so a client cannot double its rate by switching protocol.
//!
//! Time is passed in (`now`), so the buckets are tested without sleeping.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

/// `[limits]`: requests per second per client; off (0) by default.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Sustained requests per second a client may send; 0 turns limiting off.
    pub requests_per_second: f64,
    /// Requests a client may send at once after being idle (the bucket's size). Default: one
    /// second's worth, at least 1.
    pub burst: Option<u32>,
    /// Clients tracked at once; past it, idle clients are forgotten first. Bounds memory under
    /// a flood of distinct addresses.
    pub max_clients: usize,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig { requests_per_second: 0.0, burst: None, max_clients: 100_000 }
    }
}

impl RateLimitConfig {
    /// Checks the values; the error names the key under `[limits]`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !self.requests_per_second.is_finite() || self.requests_per_second < 0.0 {
            return Err(("requests_per_second", "must be a number ≥ 0 (0 turns limiting off)".into()));
        }
        if self.burst == Some(0) {
            return Err(("burst", "must be at least 1".into()));
        }
        if self.max_clients == 0 {
            return Err(("max_clients", "must be at least 1".into()));
        }
        Ok(())
    }

    fn capacity(&self) -> f64 {
        f64::from(self.burst.unwrap_or_else(|| self.requests_per_second.ceil().max(1.0) as u32))
    }
}

/// Token buckets per client.
#[derive(Debug)]
pub struct RateLimiter {
    config: RateLimitConfig,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl RateLimiter {
    /// A limiter with `config` (validated by the caller).
    pub fn new(config: RateLimitConfig) -> Self {
        RateLimiter { config, buckets: Mutex::new(HashMap::new()) }
    }

    /// Whether limiting is on.
    pub fn enabled(&self) -> bool {
        self.config.requests_per_second > 0.0
    }

    /// Takes one request from `client`'s bucket at `now`; when it is empty, answers how long
    /// until the next request would be allowed (for `Retry-After`).
    pub fn check(&self, client: &str, now: Instant) -> Result<(), Duration> {
        if !self.enabled() {
            return Ok(());
        }
        let rate = self.config.requests_per_second;
        let capacity = self.config.capacity();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if !buckets.contains_key(client) && buckets.len() >= self.config.max_clients {
            forget_idle(&mut buckets, self.config.max_clients, now, rate, capacity);
        }
        let bucket = buckets.entry(client.to_owned()).or_insert(Bucket { tokens: capacity, updated: now });
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(capacity);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }

    /// Clients currently tracked.
    pub fn clients(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Drops the buckets that have refilled (their clients lose nothing by being forgotten); if
/// that leaves no room, the least recently used one.
fn forget_idle(buckets: &mut HashMap<String, Bucket>, max: usize, now: Instant, rate: f64, capacity: f64) {
    let full =
        |b: &Bucket| b.tokens + now.saturating_duration_since(b.updated).as_secs_f64() * rate >= capacity;
    buckets.retain(|_, b| !full(b));
    if buckets.len() >= max
        && let Some(oldest) = buckets.iter().min_by_key(|(_, b)| b.updated).map(|(k, _)| k.clone())
    {
        buckets.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rps: f64, burst: Option<u32>, max_clients: usize) -> RateLimiter {
        let config = RateLimitConfig { requests_per_second: rps, burst, max_clients };
        config.validate().unwrap();
        RateLimiter::new(config)
    }

    #[test]
    fn off_by_default() {
        let l = RateLimiter::new(RateLimitConfig::default());
        let now = Instant::now();
        assert!((0..10_000).all(|_| l.check("a", now).is_ok()));
        assert_eq!(l.clients(), 0);
    }

    #[test]
    fn a_burst_then_the_sustained_rate() {
        let l = limiter(10.0, Some(5), 10);
        let t0 = Instant::now();
        assert!((0..5).all(|_| l.check("a", t0).is_ok()));
        let wait = l.check("a", t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        // 100 ms later one more request is allowed, and only one.
        let t1 = t0 + Duration::from_millis(100);
        assert!(l.check("a", t1).is_ok());
        assert!(l.check("a", t1).is_err());
        // Another client has its own bucket.
        assert!(l.check("b", t1).is_ok());
        // The bucket refills to its size, not beyond.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| l.check("a", t2).is_ok()).count(), 5);
    }

    #[test]
    fn the_default_burst_is_one_seconds_worth() {
        let l = limiter(2.5, None, 10);
        let t0 = Instant::now();
        assert_eq!((0..10).filter(|_| l.check("a", t0).is_ok()).count(), 3);
    }

    #[test]
    fn tracked_clients_stay_bounded_and_busy_ones_are_kept_longest() {
        let l = limiter(1.0, Some(2), 3);
        let t0 = Instant::now();
        for c in ["a", "b", "c"] {
            l.check(c, t0).unwrap();
        }
        // "a" is busy (its bucket is not full), so a new client evicts the least recently used.
        let t1 = t0 + Duration::from_millis(10);
        l.check("a", t1).unwrap();
        l.check("d", t1).unwrap();
        assert_eq!(l.clients(), 3);
        // "a" kept its state: its bucket is empty now.
        assert!(l.check("a", t1).is_err());
        for i in 0..1000 {
            let _ = l.check(&format!("flood-{i}"), t1);
        }
        assert!(l.clients() <= 3);
    }

    #[test]
    fn bad_values_name_the_key() {
        let bad = |c: RateLimitConfig| c.validate().unwrap_err().0;
        let base = RateLimitConfig::default();
        assert_eq!(bad(RateLimitConfig { requests_per_second: -1.0, ..base.clone() }), "requests_per_second");
        assert_eq!(
            bad(RateLimitConfig { requests_per_second: f64::NAN, ..base.clone() }),
            "requests_per_second"
        );
        assert_eq!(bad(RateLimitConfig { burst: Some(0), ..base.clone() }), "burst");
        assert_eq!(bad(RateLimitConfig { max_clients: 0, ..base }), "max_clients");
    }
}
