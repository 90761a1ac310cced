//! The one retry policy of Lakestream: exponential backoff with full jitter.
//!
//! Every retrying caller uses it: the S3 backend's request retries, the Oxia client's reads,
//! session calls and reconnects, the Iceberg commits, and every compare-and-set loop over the
//! metadata store (most through `lakestream_meta::cas`). It only computes pauses; the caller
//! sleeps on its runtime's clock (tokio's), so that tests with paused time run the same code.
//!
//! - **Schedule.** Retry `n` (0 for the first retry) sleeps a uniform random time in
//!   `[0, min(max, initial · 2ⁿ))` — "full jitter" (AWS Architecture Blog, "Exponential
//!   Backoff And Jitter"): contenders that failed together spread over the whole window
//!   instead of retrying in lockstep at its edge.
//! - **Attempts.** [`BackoffPolicy::max_attempts`] counts every attempt, the first included;
//!   `1` disables retries. [`BackoffPolicy::unbounded`] is for loops bounded by something else
//!   (a deadline, a session's end).
//! - **Randomness is injected.** A [`Jitter`] is a seeded generator (SplitMix64): a seed
//!   replays the same pauses. Components take one (or a seed) from their caller; tests and
//!   simulations seed it. The default is [`Jitter::process`], one generator per process
//!   seeded from the OS ([`Jitter::from_entropy`], the one place that draws such a seed) —
//!   processes must not share a seed, or they would retry in lockstep, which is what jitter
//!   is for.
//!
//! Why not the `backon` crate: its jitter adds a random part on top of the exponential
//! delay (`[d, 2d)`) rather than drawing the whole delay, it drives the sleeping itself
//! (its own sleeper and retry loop around a closure), which does not fit loops that decide
//! between re-routing, re-reading and pausing, and its randomness is not injectable as one
//! seeded source shared by a component. The schedule is twenty lines; a pure module in this
//! crate (which already holds the other shared value types and the `Clock`) reaches every
//! crate without a new dependency.
//!
//! ```
//! use std::time::Duration;
//! use lakestream_format::retry::{Backoff, BackoffPolicy};
//!
//! let policy = BackoffPolicy::new(Duration::from_millis(100), Duration::from_secs(5), 6);
//! let backoff = Backoff::seeded(policy, 7);
//! for retry in 0..5 {
//!     assert!(backoff.delay(retry) < policy.bound(retry));
//! }
//! assert_eq!(policy.bound(10), Duration::from_secs(5), "capped");
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The settings of a retry schedule: a plain value, cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// The bound of the first retry's pause; it doubles per retry.
    pub initial: Duration,
    /// The largest bound.
    pub max: Duration,
    /// Attempts, including the first (`1`: no retry; `u32::MAX`: bounded elsewhere).
    pub max_attempts: u32,
}

impl BackoffPolicy {
    /// A policy of `max_attempts` attempts with pauses below `initial · 2ⁿ`, capped at `max`.
    pub const fn new(initial: Duration, max: Duration, max_attempts: u32) -> Self {
        BackoffPolicy { initial, max, max_attempts }
    }

    /// A policy whose loop is bounded by something else (a deadline, a session's end).
    pub const fn unbounded(initial: Duration, max: Duration) -> Self {
        BackoffPolicy { initial, max, max_attempts: u32::MAX }
    }

    /// The pauses of compare-and-set loops over the metadata store: a lost race means another
    /// writer just succeeded, so the first retry waits below 1 ms and the bound doubles up to
    /// 100 ms (a metadata write takes a few ms; contenders spread within a few rounds).
    pub const fn compare_and_set(max_attempts: u32) -> Self {
        BackoffPolicy::new(Duration::from_millis(1), Duration::from_millis(100), max_attempts)
    }

    /// This policy with another attempt bound.
    pub const fn with_max_attempts(self, max_attempts: u32) -> Self {
        BackoffPolicy { max_attempts, ..self }
    }

    /// The upper bound of the pause before retry `retry` (0-based): `min(max, initial · 2ʳᵉᵗʳʸ)`.
    pub fn bound(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The pause before retry `retry`: `unit` (uniform in `[0, 1)`) of [`BackoffPolicy::bound`].
    pub fn delay_at(&self, retry: u32, unit: f64) -> Duration {
        self.bound(retry).mul_f64(unit.clamp(0.0, 1.0))
    }

    /// Whether another attempt may follow `attempts` made ones.
    pub fn allows_another(&self, attempts: u32) -> bool {
        attempts < self.max_attempts
    }

    /// Checks the settings: at least one attempt, and `initial <= max`. The error names the
    /// offending value; callers prefix their setting's name.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1".to_owned());
        }
        if self.initial > self.max {
            return Err(format!(
                "the initial backoff {:?} is more than the max {:?}",
                self.initial, self.max
            ));
        }
        Ok(())
    }
}

/// A seeded source of jitter: a SplitMix64 generator. The same seed gives the same sequence.
/// Shared by reference; each draw advances it atomically.
#[derive(Debug)]
pub struct Jitter {
    state: AtomicU64,
}

impl Jitter {
    /// A generator replaying the sequence of `seed` (tests, simulations, a configured seed).
    pub fn seeded(seed: u64) -> Self {
        Jitter { state: AtomicU64::new(seed) }
    }

    /// A generator seeded from the OS, so that processes do not retry in lockstep. The one
    /// place Lakestream draws an unseeded random number for backoff; library code takes its
    /// jitter from its caller and uses this only as the documented default.
    pub fn from_entropy() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // `RandomState` keys come from the OS once per thread, then advance per instance.
        let seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
        Jitter::seeded(seed)
    }

    /// The process's generator, seeded from the OS on first use: the default of components
    /// whose caller injects none.
    pub fn process() -> Arc<Jitter> {
        static PROCESS: std::sync::OnceLock<Arc<Jitter>> = std::sync::OnceLock::new();
        Arc::clone(PROCESS.get_or_init(|| Arc::new(Jitter::from_entropy())))
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut z = self.state.fetch_add(GAMMA, Ordering::Relaxed).wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next value, uniform in `[0, 1)`.
    pub fn next_unit(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A policy with its jitter: what a retrying caller holds. Cheap to clone (clones share the
/// generator).
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: BackoffPolicy,
    jitter: Arc<Jitter>,
}

impl Backoff {
    /// `policy`, drawing its jitter from `jitter`.
    pub fn new(policy: BackoffPolicy, jitter: Arc<Jitter>) -> Self {
        Backoff { policy, jitter }
    }

    /// `policy` with a generator seeded by `seed`.
    pub fn seeded(policy: BackoffPolicy, seed: u64) -> Self {
        Backoff::new(policy, Arc::new(Jitter::seeded(seed)))
    }

    /// `policy` with the process's generator ([`Jitter::process`]).
    pub fn process(policy: BackoffPolicy) -> Self {
        Backoff::new(policy, Jitter::process())
    }

    /// `policy` with a generator seeded by `seed` when given, else the process's (seeded from
    /// the OS): the usual meaning of a `retry_seed` setting.
    pub fn with_seed(policy: BackoffPolicy, seed: Option<u64>) -> Self {
        match seed {
            Some(seed) => Backoff::seeded(policy, seed),
            None => Backoff::process(policy),
        }
    }

    /// The same generator under another policy.
    pub fn with_policy(&self, policy: BackoffPolicy) -> Self {
        Backoff { policy, jitter: Arc::clone(&self.jitter) }
    }

    /// The policy.
    pub fn policy(&self) -> &BackoffPolicy {
        &self.policy
    }

    /// Attempts, including the first.
    pub fn max_attempts(&self) -> u32 {
        self.policy.max_attempts
    }

    /// Whether another attempt may follow `attempts` made ones.
    pub fn allows_another(&self, attempts: u32) -> bool {
        self.policy.allows_another(attempts)
    }

    /// The pause before retry `retry` (0 for the first retry), drawn below
    /// [`BackoffPolicy::bound`].
    pub fn delay(&self, retry: u32) -> Duration {
        self.policy.delay_at(retry, self.jitter.next_unit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: BackoffPolicy = BackoffPolicy::new(Duration::from_millis(100), Duration::from_secs(2), 10);

    #[test]
    fn delays_are_jittered_below_an_exponential_bound() {
        let backoff = Backoff::seeded(POLICY, 9);
        let delays: Vec<Duration> = (0..8).map(|n| backoff.delay(n)).collect();
        for (n, delay) in delays.iter().enumerate() {
            let bound = Duration::from_millis(100 * (1 << n)).min(Duration::from_secs(2));
            assert_eq!(POLICY.bound(n as u32), bound);
            assert!(*delay < bound, "retry {n}: {delay:?} < {bound:?}");
        }
        let again = Backoff::seeded(POLICY, 9);
        assert_eq!(delays, (0..8).map(|n| again.delay(n)).collect::<Vec<_>>(), "same seed, same delays");
        let other = Backoff::seeded(POLICY, 10);
        assert_ne!(delays, (0..8).map(|n| other.delay(n)).collect::<Vec<_>>(), "jitter depends on the seed");
        assert!(backoff.delay(200) <= Duration::from_secs(2), "huge retry numbers stay at the cap");
        assert_eq!(POLICY.bound(u32::MAX), Duration::from_secs(2));
    }

    /// Full jitter: the draws cover the whole window, not only its upper half (as "equal
    /// jitter" or a delay plus a random part would).
    #[test]
    fn jitter_spreads_over_the_whole_window() {
        let jitter = Jitter::seeded(1);
        let units: Vec<f64> = (0..10_000).map(|_| jitter.next_unit()).collect();
        assert!(units.iter().all(|u| (0.0..1.0).contains(u)));
        for decile in 0..10 {
            let low = f64::from(decile) / 10.0;
            let share = units.iter().filter(|u| (low..low + 0.1).contains(*u)).count();
            assert!((800..1200).contains(&share), "decile {decile}: {share} of 10 000");
        }
        assert_eq!(POLICY.delay_at(0, 0.0), Duration::ZERO);
        assert_eq!(POLICY.delay_at(3, 0.5), Duration::from_millis(400));
    }

    #[test]
    fn attempts_count_the_first_and_clones_share_the_generator() {
        let policy = BackoffPolicy::compare_and_set(3);
        assert!(policy.allows_another(2) && !policy.allows_another(3));
        assert!(BackoffPolicy::unbounded(Duration::ZERO, Duration::ZERO).allows_another(u32::MAX - 1));
        let backoff = Backoff::seeded(POLICY, 5);
        let clone = backoff.clone();
        let (a, b) = (backoff.delay(4), clone.delay(4));
        let replay = Backoff::seeded(POLICY, 5);
        assert_eq!((replay.delay(4), replay.delay(4)), (a, b), "one sequence, drawn by both clones");
        assert_eq!(backoff.with_policy(policy).max_attempts(), 3);
    }

    #[test]
    fn unusable_policies_are_refused() {
        assert!(POLICY.validate().is_ok());
        assert!(POLICY.with_max_attempts(0).validate().unwrap_err().contains("max_attempts"));
        let inverted = BackoffPolicy::new(Duration::from_secs(3), Duration::from_secs(1), 2);
        assert!(inverted.validate().unwrap_err().contains("more than"));
    }

    #[test]
    fn entropy_seeds_differ_and_the_process_has_one_generator() {
        let (a, b) = (Jitter::from_entropy(), Jitter::from_entropy());
        assert_ne!(a.next_u64(), b.next_u64());
        assert!(Arc::ptr_eq(&Jitter::process(), &Jitter::process()));
        assert!(Arc::ptr_eq(&Backoff::with_seed(POLICY, None).jitter, &Jitter::process()));
        let seeded = Backoff::with_seed(POLICY, Some(4));
        assert_eq!(seeded.delay(3), Backoff::seeded(POLICY, 4).delay(3));
    }
}
