//! Retries with exponential backoff and full jitter.
//!
//! The SDK's own retries are switched off so that one policy, which knows our error
//! classes, decides: throttling (503 SlowDown, 429) and transient failures (500, 502, 504,
//! connection errors) are retried; timeouts of reads are retried; a write whose attempt may
//! have reached the server is retried only where repeating it is safe (see the store).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::Duration;

/// The backoff schedule: attempt `n` (0-based retry number) sleeps a uniform random time
/// below `min(max, initial * 2^n)`.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    max_attempts: u32,
    generator: Mutex<u64>,
}

impl Backoff {
    /// A schedule; `seed` fixes the jitter (tests), `None` seeds it from the OS.
    pub fn new(initial: Duration, max: Duration, max_attempts: u32, seed: Option<u64>) -> Self {
        let seed = seed.unwrap_or_else(|| RandomState::new().build_hasher().finish());
        Backoff { initial, max, max_attempts, generator: Mutex::new(seed) }
    }

    /// Attempts per request, including the first.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The sleep before retry number `retry` (0 for the first retry).
    pub fn delay(&self, retry: u32) -> Duration {
        let bound = self.initial.saturating_mul(1u32.checked_shl(retry).unwrap_or(u32::MAX)).min(self.max);
        let unit = self.next_unit();
        bound.mul_f64(unit)
    }

    /// SplitMix64 step, as a uniform value in [0, 1).
    fn next_unit(&self) -> f64 {
        let mut state = self.generator.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_jittered_below_an_exponential_bound() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2), 10, Some(9));
        let delays: Vec<Duration> = (0..8).map(|n| backoff.delay(n)).collect();
        for (n, delay) in delays.iter().enumerate() {
            let bound = Duration::from_millis(100 * (1 << n)).min(Duration::from_secs(2));
            assert!(*delay < bound, "retry {n}: {delay:?} < {bound:?}");
        }
        let again = Backoff::new(Duration::from_millis(100), Duration::from_secs(2), 10, Some(9));
        assert_eq!(delays, (0..8).map(|n| again.delay(n)).collect::<Vec<_>>(), "same seed, same delays");
        let other = Backoff::new(Duration::from_millis(100), Duration::from_secs(2), 10, Some(10));
        assert_ne!(delays, (0..8).map(|n| other.delay(n)).collect::<Vec<_>>(), "jitter depends on the seed");
        assert!(backoff.delay(200) <= Duration::from_secs(2), "huge retry numbers stay at the cap");
    }
}
