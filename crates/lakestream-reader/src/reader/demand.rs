//! How much of the WAL objects it reads this reader ends up using: the evidence behind the
//! adaptive mode's choice between whole-object and ranged reads of small sections.
//!
//! A WAL object holds many logs. When the reader serves readers of most of an object's logs
//! (the partitions of a stream, consumed together), one GET of the whole object, shared
//! through the cache, delivers every section: the fewest requests, and no byte fetched twice.
//! When it serves one log of many, a ranged read of that log's span fetches its share only.
//! The reader cannot tell which from one read, so it watches: for each object read, the
//! distinct logs whose sections it delivered within [`WINDOW`] of the first, as a share
//! (coverage) of the object's payload. An object whose coverage reaches one half counts as
//! shared at once; one that ages out below it counts as unshared; an exponential average of
//! the counts decides the mode of the next objects. Before any evidence the reader reads
//! small sections by range, and looks ahead only [`UNDECIDED_LOOK_AHEAD`] objects, so that
//! the first objects decide the rest.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lakestream_format::LogId;

/// How long after an object's first read its other sections count towards its coverage.
pub(super) const WINDOW: Duration = Duration::from_secs(2);

/// Read-ahead depth, in records, while the reader has no evidence yet.
pub(super) const UNDECIDED_LOOK_AHEAD: usize = 2;

/// Objects followed at once; the oldest are counted (as they stand) beyond it.
const MAX_FOLLOWED: usize = 4096;

/// Weight of each new object in the average.
const ALPHA: f64 = 0.3;

/// The evidence so far.
#[derive(Debug, Default)]
pub(super) struct Demand {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    objects: HashMap<String, Followed>,
    /// Objects by first read, oldest first.
    order: VecDeque<(Instant, String)>,
    /// The average of the objects' outcomes (1 shared, 0 not), once any is known.
    shared: Option<f64>,
}

#[derive(Debug)]
struct Followed {
    size: u64,
    logs: Vec<LogId>,
    delivered: u64,
    counted: bool,
}

impl State {
    fn count(&mut self, shared: bool) {
        let x = if shared { 1.0 } else { 0.0 };
        self.shared = Some(match self.shared {
            None => x,
            Some(avg) => avg + ALPHA * (x - avg),
        });
    }

    /// Counts the objects whose window has passed (and the oldest beyond the bound).
    fn expire(&mut self, now: Instant) {
        while let Some((first, _)) = self.order.front() {
            if now.duration_since(*first) < WINDOW && self.order.len() <= MAX_FOLLOWED {
                break;
            }
            let Some((_, name)) = self.order.pop_front() else { break };
            if let Some(f) = self.objects.remove(&name)
                && !f.counted
            {
                self.count(false);
            }
        }
    }
}

impl Demand {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the section of `log_id` (`section` payload bytes) of `object` (a payload
    /// region of `size` bytes) was delivered at `now`.
    pub(super) fn delivered(&self, object: &str, size: u64, log_id: LogId, section: u64, now: Instant) {
        let mut state = self.lock();
        state.expire(now);
        if !state.objects.contains_key(object) {
            state.order.push_back((now, object.to_string()));
            state.objects.insert(
                object.to_string(),
                Followed { size, logs: Vec::new(), delivered: 0, counted: false },
            );
        }
        let Some(f) = state.objects.get_mut(object) else { return };
        if f.counted || f.logs.contains(&log_id) {
            return;
        }
        f.logs.push(log_id);
        f.delivered = f.delivered.saturating_add(section);
        if f.delivered.saturating_mul(2) >= f.size {
            f.counted = true;
            state.count(true);
        }
    }

    /// Whether objects are shared (read by most of their logs), once there is evidence.
    pub(super) fn shared(&self, now: Instant) -> Option<bool> {
        let mut state = self.lock();
        state.expire(now);
        state.shared.map(|avg| avg >= 0.5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_read_by_most_of_their_logs_make_the_reader_read_whole_objects() {
        let d = Demand::default();
        let t = Instant::now();
        assert_eq!(d.shared(t), None);
        // Eight logs of an eighth each: shared once four were read.
        for log in 0..3 {
            d.delivered("a", 800, LogId(log), 100, t);
        }
        assert_eq!(d.shared(t), None);
        d.delivered("a", 800, LogId(3), 100, t);
        assert_eq!(d.shared(t), Some(true));
        // The same log twice counts once.
        d.delivered("b", 800, LogId(0), 100, t);
        d.delivered("b", 800, LogId(0), 100, t);
        assert_eq!(d.shared(t), Some(true), "b is not counted before its window ends");
        // One log of each object, for a while: back to ranged reads.
        let mut now = t;
        for i in 0..6 {
            now += WINDOW;
            d.delivered(&format!("c{i}"), 800, LogId(0), 100, now);
        }
        assert_eq!(d.shared(now + WINDOW), Some(false));
    }
}
