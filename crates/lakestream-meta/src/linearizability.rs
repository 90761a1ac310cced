//! A linearizability checker for histories of one versioned register (one key of a store),
//! in the style of Wing & Gong: search for an order of the operations that respects real
//! time (an operation that completed before another was invoked comes first) and that a
//! sequential register would answer exactly as the store did.
//!
//! The register's state is the record (value, version) or nothing. Versions are chosen by the
//! store, so the model accepts any version a write reports as long as it is greater than the
//! current one ("every write gives a new, greater version"), and then requires every later
//! read and CAS to agree with it.
//!
//! The search memoizes (operations done, register state) pairs that lead nowhere, which keeps
//! histories of a few dozen operations from several clients fast. Histories are limited to
//! [`MAX_OPERATIONS`].

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::Version;

/// The longest history [`check`] accepts.
pub const MAX_OPERATIONS: usize = 64;

/// What a client asked the register to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterOp {
    /// An unconditional put of `value`.
    Put {
        /// The value written.
        value: u64,
    },
    /// A read.
    Get,
    /// A compare-and-set of `value` on `expected`.
    Cas {
        /// The version the client expected.
        expected: Version,
        /// The value written.
        value: u64,
    },
}

/// What the register answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterResult {
    /// A put or CAS took effect with this new version.
    Written {
        /// The version the store gave the record.
        version: Version,
    },
    /// A read found this (value, version), or no record.
    Read(Option<(u64, Version)>),
    /// A CAS found another version, or no record.
    CasFailed,
}

/// One completed operation of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// The client that issued it (for reports only).
    pub client: usize,
    /// When it was invoked, on a clock shared by all clients.
    pub invoked: u64,
    /// When its response arrived, on the same clock; greater than `invoked`.
    pub completed: u64,
    /// The request.
    pub op: RegisterOp,
    /// The response.
    pub result: RegisterResult,
}

/// Why a history was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// No order of the operations explains the responses.
    #[error("history of {operations} operations is not linearizable (explored {explored} states)")]
    NotLinearizable {
        /// The history's length.
        operations: usize,
        /// How many search states were tried.
        explored: usize,
    },
    /// The history is longer than [`MAX_OPERATIONS`].
    #[error("history of {operations} operations is longer than the checker's limit of {MAX_OPERATIONS}")]
    TooLong {
        /// The history's length.
        operations: usize,
    },
    /// An operation completed before it was invoked.
    #[error("operation {index} completes ({completed}) before it is invoked ({invoked})")]
    BadTimes {
        /// The operation's index in the history.
        index: usize,
        /// Its invocation time.
        invoked: u64,
        /// Its completion time.
        completed: u64,
    },
}

type State = Option<(u64, Version)>;

/// The sequential register: the state after `op` answered `result`, or `None` when a register
/// in `state` could not have answered so.
fn apply(state: State, op: RegisterOp, result: RegisterResult) -> Option<State> {
    let current_version = state.map(|(_, v)| v);
    let newer = |version: Version| current_version.is_none_or(|c| version > c);
    match (op, result) {
        (RegisterOp::Put { value }, RegisterResult::Written { version }) if newer(version) => {
            Some(Some((value, version)))
        }
        (RegisterOp::Get, RegisterResult::Read(found)) if found == state => Some(state),
        (RegisterOp::Cas { expected, value }, RegisterResult::Written { version })
            if current_version == Some(expected) && newer(version) =>
        {
            Some(Some((value, version)))
        }
        (RegisterOp::Cas { expected, .. }, RegisterResult::CasFailed)
            if current_version != Some(expected) =>
        {
            Some(state)
        }
        _ => None,
    }
}

/// Checks that `history`, starting from an absent record, is linearizable. Returns the
/// indices of the operations in a valid linearization order.
pub fn check(history: &[Operation]) -> Result<Vec<usize>, CheckError> {
    if history.len() > MAX_OPERATIONS {
        return Err(CheckError::TooLong { operations: history.len() });
    }
    if let Some((index, op)) = history.iter().enumerate().find(|(_, op)| op.completed <= op.invoked) {
        return Err(CheckError::BadTimes { index, invoked: op.invoked, completed: op.completed });
    }
    let mut search =
        Search { history, dead_ends: HashSet::new(), order: Vec::with_capacity(history.len()), explored: 0 };
    if search.extend(0, None) {
        Ok(search.order)
    } else {
        Err(CheckError::NotLinearizable { operations: history.len(), explored: search.explored })
    }
}

struct Search<'h> {
    history: &'h [Operation],
    /// (operations done, state) pairs from which no linearization exists.
    dead_ends: HashSet<(u64, State)>,
    order: Vec<usize>,
    explored: usize,
}

impl Search<'_> {
    /// Tries to linearize the operations not in `done`, from `state`.
    fn extend(&mut self, done: u64, state: State) -> bool {
        if self.order.len() == self.history.len() {
            return true;
        }
        if self.dead_ends.contains(&(done, state)) {
            return false;
        }
        self.explored += 1;
        let pending = || (0..self.history.len()).filter(move |i| done & (1u64 << i) == 0);
        // An operation may go next only if no pending operation completed before it was invoked.
        let earliest_completion = pending().map(|i| self.history[i].completed).min().unwrap_or(u64::MAX);
        let candidates: Vec<usize> =
            pending().filter(|&i| self.history[i].invoked < earliest_completion).collect();
        for i in candidates {
            let op = &self.history[i];
            if let Some(next) = apply(state, op.op, op.result) {
                self.order.push(i);
                if self.extend(done | (1u64 << i), next) {
                    return true;
                }
                self.order.pop();
            }
        }
        self.dead_ends.insert((done, state));
        false
    }
}

/// A clock shared by the clients of a recorded history: every tick is unique and greater than
/// all earlier ones, so it orders invocations and responses as real time does.
#[derive(Debug, Default)]
pub struct HistoryClock {
    now: AtomicU64,
}

impl HistoryClock {
    /// The next instant.
    pub fn tick(&self) -> u64 {
        self.now.fetch_add(1, Ordering::SeqCst) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: usize, invoked: u64, completed: u64, op: RegisterOp, result: RegisterResult) -> Operation {
        Operation { client, invoked, completed, op, result }
    }

    #[test]
    fn sequential_history_is_accepted() {
        let history = [
            op(0, 1, 2, RegisterOp::Get, RegisterResult::Read(None)),
            op(0, 3, 4, RegisterOp::Put { value: 1 }, RegisterResult::Written { version: 5 }),
            op(0, 5, 6, RegisterOp::Cas { expected: 5, value: 2 }, RegisterResult::Written { version: 9 }),
            op(0, 7, 8, RegisterOp::Cas { expected: 5, value: 3 }, RegisterResult::CasFailed),
            op(0, 9, 10, RegisterOp::Get, RegisterResult::Read(Some((2, 9)))),
        ];
        assert_eq!(check(&history).unwrap(), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn concurrent_operations_may_take_effect_in_either_order() {
        // The read overlaps both writes and sees the first client's value: that client's put
        // must be linearized last, although it was invoked first.
        let history = [
            op(0, 1, 6, RegisterOp::Put { value: 1 }, RegisterResult::Written { version: 2 }),
            op(1, 2, 4, RegisterOp::Put { value: 2 }, RegisterResult::Written { version: 1 }),
            op(2, 3, 7, RegisterOp::Get, RegisterResult::Read(Some((1, 2)))),
        ];
        assert_eq!(check(&history).unwrap(), [1, 0, 2]);
    }

    #[test]
    fn stale_read_after_a_completed_write_is_rejected() {
        // The put completed (time 2) before the get was invoked (time 3), yet the get saw nothing.
        let history = [
            op(0, 1, 2, RegisterOp::Put { value: 1 }, RegisterResult::Written { version: 1 }),
            op(1, 3, 4, RegisterOp::Get, RegisterResult::Read(None)),
        ];
        assert!(matches!(check(&history), Err(CheckError::NotLinearizable { operations: 2, .. })));
    }

    #[test]
    fn two_successful_cas_on_one_version_are_rejected() {
        let history = [
            op(0, 1, 2, RegisterOp::Put { value: 1 }, RegisterResult::Written { version: 1 }),
            op(1, 3, 6, RegisterOp::Cas { expected: 1, value: 2 }, RegisterResult::Written { version: 2 }),
            op(2, 4, 5, RegisterOp::Cas { expected: 1, value: 3 }, RegisterResult::Written { version: 3 }),
        ];
        assert!(matches!(check(&history), Err(CheckError::NotLinearizable { .. })));
    }

    #[test]
    fn versions_that_go_backwards_are_rejected() {
        let history = [
            op(0, 1, 2, RegisterOp::Put { value: 1 }, RegisterResult::Written { version: 5 }),
            op(0, 3, 4, RegisterOp::Put { value: 2 }, RegisterResult::Written { version: 4 }),
        ];
        assert!(matches!(check(&history), Err(CheckError::NotLinearizable { .. })));
    }

    #[test]
    fn malformed_histories_are_refused() {
        let bad_time = [op(0, 3, 3, RegisterOp::Get, RegisterResult::Read(None))];
        assert!(matches!(check(&bad_time), Err(CheckError::BadTimes { index: 0, .. })));
        let long: Vec<Operation> = (0..65)
            .map(|i| op(0, 2 * i + 1, 2 * i + 2, RegisterOp::Get, RegisterResult::Read(None)))
            .collect();
        assert!(matches!(check(&long), Err(CheckError::TooLong { operations: 65 })));
        assert!(check(&long[..64]).is_ok());
    }
}
