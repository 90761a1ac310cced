//! [`TestRng`]: the one seeded generator of randomized tests and simulations (feature
//! `testkit`), and the seeds they run with ([`Seed`], [`sweep`]).
//!
//! A test's seed is printed when it starts, and again with how to replay it when the test
//! fails; `LAKESTREAM_TEST_SEED=<n>` replays it. A sweep over many seeds runs
//! `LAKESTREAM_TEST_SEEDS=<count>` seeds instead of its default number.
//!
//! The generator is SplitMix64, the project's one ([`lakestream_format::retry::Jitter`]): a
//! seed gives the same sequence on every machine. Not for cryptography.
//!
//! ```
//! use lakestream_meta::test_rng::{Seed, TestRng};
//!
//! let seed = Seed::or("my_test", 7); // LAKESTREAM_TEST_SEED, else 7; printed
//! let rng = seed.rng();
//! let replay = TestRng::new(seed.value());
//! for _ in 0..100 {
//!     let n = rng.between(3, 9);
//!     assert_eq!(n, replay.between(3, 9));
//!     assert!((3..=9).contains(&n));
//! }
//! ```

use std::ops::Range;

use lakestream_format::retry::Jitter;

/// The variable that replays one seed.
pub const SEED_VAR: &str = "LAKESTREAM_TEST_SEED";

/// The variable that sets how many seeds a [`sweep`] runs.
pub const SEEDS_VAR: &str = "LAKESTREAM_TEST_SEEDS";

/// A seeded generator. Shared by reference: each draw advances it atomically.
#[derive(Debug)]
pub struct TestRng {
    seed: u64,
    generator: Jitter,
}

impl TestRng {
    /// The generator of `seed` (any value, 0 included). For a test's own seed, prefer
    /// [`Seed::rng`], which reports the seed; this is for generators derived from it.
    pub fn new(seed: u64) -> TestRng {
        TestRng { seed, generator: Jitter::seeded(seed) }
    }

    /// The seed the generator started from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        self.generator.next_u64()
    }

    /// A number in `[0, 1)`.
    pub fn unit(&self) -> f64 {
        self.generator.next_unit()
    }

    /// True with probability `p`.
    pub fn chance(&self, p: f64) -> bool {
        self.unit() < p
    }

    /// A number in `[0, n)` (0 when `n` is 0).
    pub fn below(&self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A number in `[low, high]` (`low` when `high <= low`).
    pub fn between(&self, low: u64, high: u64) -> u64 {
        if high <= low { low } else { low + self.next_u64() % (high - low + 1) }
    }

    /// `len` random bytes (incompressible filler).
    pub fn bytes(&self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// The seed a test runs with. Printed when made; if the test panics while it is alive, it is
/// printed again with the command that replays it.
#[derive(Debug)]
pub struct Seed {
    test: String,
    value: u64,
}

impl Seed {
    /// `LAKESTREAM_TEST_SEED` when set, else `default`.
    pub fn or(test: &str, default: u64) -> Seed {
        Seed::of(test, replayed().unwrap_or(default))
    }

    /// `LAKESTREAM_TEST_SEED` when set, else a fresh seed (from the operating system).
    pub fn fresh(test: &str) -> Seed {
        Seed::of(test, replayed().unwrap_or_else(|| Jitter::from_entropy().next_u64()))
    }

    /// `value`, one seed of a [`sweep`].
    pub fn of(test: &str, value: u64) -> Seed {
        println!("{test}: seed {value} (replay with {SEED_VAR}={value})");
        Seed { test: test.to_owned(), value }
    }

    /// The seed.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// A generator of this seed.
    pub fn rng(&self) -> TestRng {
        TestRng::new(self.value)
    }
}

impl Drop for Seed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let (test, seed) = (&self.test, self.value);
            eprintln!("{test} failed with seed {seed}: replay it with {SEED_VAR}={seed}");
        }
    }
}

/// The seeds a sweep runs: the one of `LAKESTREAM_TEST_SEED` when set; else
/// `LAKESTREAM_TEST_SEEDS` seeds from `defaults.start` when that is set; else `defaults`.
/// Make a [`Seed::of`] each, so that a failing one is reported.
pub fn sweep(test: &str, defaults: Range<u64>) -> Vec<u64> {
    if let Some(seed) = replayed() {
        println!("{test}: replaying seed {seed} ({SEED_VAR})");
        return vec![seed];
    }
    let count = number(SEEDS_VAR).unwrap_or(defaults.end.saturating_sub(defaults.start));
    (defaults.start..defaults.start.saturating_add(count)).collect()
}

fn replayed() -> Option<u64> {
    number(SEED_VAR)
}

/// A number from the environment; a variable set to anything else is a mistake, reported.
fn number(var: &str) -> Option<u64> {
    let value = std::env::var(var).ok()?;
    match value.trim().parse() {
        Ok(n) => Some(n),
        Err(e) => panic!("{var}={value:?} is not a number: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_and_draws_stay_in_range() {
        let (a, b) = (TestRng::new(7), TestRng::new(7));
        for _ in 0..1000 {
            let x = a.between(3, 9);
            assert_eq!(x, b.between(3, 9));
            assert!((3..=9).contains(&x));
            assert!(a.below(5) < 5 && (0.0..1.0).contains(&a.unit()));
            b.below(5);
            b.unit();
        }
        assert_ne!(TestRng::new(1).next_u64(), TestRng::new(2).next_u64());
        assert_eq!((TestRng::new(0).between(5, 5), TestRng::new(0).below(0)), (5, 0));
        assert_eq!(TestRng::new(3).bytes(13), TestRng::new(3).bytes(13));
        assert_eq!(TestRng::new(3).bytes(13).len(), 13);
        // The project's generator: the same sequence as the backoff's jitter of the seed.
        assert_eq!(TestRng::new(9).next_u64(), Jitter::seeded(9).next_u64());
    }

    #[test]
    fn chance_follows_the_probability() {
        let rng = TestRng::new(11);
        let hits = (0..10_000).filter(|_| rng.chance(0.25)).count();
        assert!((2_000..3_000).contains(&hits), "{hits}");
        assert!(!(0..100).any(|_| rng.chance(0.0)));
    }
}
