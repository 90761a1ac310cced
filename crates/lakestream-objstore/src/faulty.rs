//! A fault-injecting wrapper for reliability tests: added delays, transient errors,
//! throttling, and writes that succeed but report a timeout (the "outcome unknown" case that
//! writers must handle without reusing a name or reporting the entries as failed).
//!
//! Decisions come from a seeded generator, so a test that calls the store in a fixed order
//! sees the same faults for the same seed; every injected fault is recorded with its
//! sequence number so a failing run can be explained and replayed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use lakestream_format::retry::Jitter;

use crate::error::{ObjectResult, ObjectStoreError};
use crate::path::{ObjectPath, ObjectPrefix};
use crate::range::ByteRange;
use crate::store::{ObjectMeta, ObjectStore, WriteOnce};

/// An operation of the [`ObjectStore`] trait, to configure faults per operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// [`ObjectStore::put`].
    Put,
    /// [`ObjectStore::get`].
    Get,
    /// [`ObjectStore::get_range`].
    GetRange,
    /// [`ObjectStore::head`].
    Head,
    /// [`ObjectStore::delete`].
    Delete,
    /// [`ObjectStore::delete_many`].
    DeleteMany,
    /// [`ObjectStore::list`] (decided once per listing).
    List,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Operation; 7] = [
        Operation::Put,
        Operation::Get,
        Operation::GetRange,
        Operation::Head,
        Operation::Delete,
        Operation::DeleteMany,
        Operation::List,
    ];

    fn name(self) -> &'static str {
        match self {
            Operation::Put => "put",
            Operation::Get => "get",
            Operation::GetRange => "get_range",
            Operation::Head => "head",
            Operation::Delete => "delete",
            Operation::DeleteMany => "delete_many",
            Operation::List => "list",
        }
    }

    fn is_write(self) -> bool {
        matches!(self, Operation::Put | Operation::Delete | Operation::DeleteMany)
    }
}

/// The faults of one operation. Probabilities are per call and are tried in the order
/// error, throttle, timeout-after-success; their sum should not exceed 1.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OperationFaults {
    /// Probability of failing with `Unavailable` without calling the inner store.
    pub error_probability: f64,
    /// Probability of failing with `Throttled` without calling the inner store.
    pub throttle_probability: f64,
    /// Probability of calling the inner store and then, if it succeeded, reporting
    /// `TimedOutAfterSend` (for writes) or `Unavailable` (for reads, whose outcome is never
    /// in doubt).
    pub timeout_after_success_probability: f64,
    /// Delay added before every call (uses tokio time, so paused-time tests do not wait).
    pub delay: Duration,
}

/// What the wrapper injects: a seed and the faults of each operation (none by default).
#[derive(Debug, Clone, Default)]
pub struct FaultConfig {
    /// Seed of the decision generator.
    pub seed: u64,
    /// Faults per operation; a missing operation gets none.
    pub faults: HashMap<Operation, OperationFaults>,
}

impl FaultConfig {
    /// No faults, with the given seed.
    pub fn new(seed: u64) -> Self {
        FaultConfig { seed, faults: HashMap::new() }
    }

    /// Sets the faults of one operation.
    pub fn with(mut self, operation: Operation, faults: OperationFaults) -> Self {
        self.faults.insert(operation, faults);
        self
    }

    /// Sets the same faults for every operation.
    pub fn with_all(mut self, faults: OperationFaults) -> Self {
        for operation in Operation::ALL {
            self.faults.insert(operation, faults);
        }
        self
    }
}

/// The kind of an injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Failed with `Unavailable` before reaching the inner store.
    Error,
    /// Failed with `Throttled` before reaching the inner store.
    Throttle,
    /// The inner store succeeded; a timeout was reported.
    TimeoutAfterSuccess,
}

/// One injected fault, for explaining and replaying a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFault {
    /// The number of the call (0-based, counting every call through the wrapper).
    pub call: u64,
    /// The operation.
    pub operation: Operation,
    /// The object or prefix.
    pub path: String,
    /// What was injected.
    pub kind: FaultKind,
}

#[derive(Debug)]
struct State {
    config: FaultConfig,
    /// The project's seeded generator (SplitMix64).
    generator: Jitter,
    calls: u64,
    injected: Vec<InjectedFault>,
}

/// Wraps a store and injects faults as [`FaultConfig`] says.
#[derive(Debug, Clone)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Clone, Copy)]
enum Decision {
    Pass,
    Fail(FaultKind),
    ReportTimeoutAfter,
}

impl FaultyStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>, config: FaultConfig) -> Self {
        let generator = Jitter::seeded(config.seed);
        FaultyStore {
            inner,
            state: Arc::new(Mutex::new(State { config, generator, calls: 0, injected: Vec::new() })),
        }
    }

    /// Replaces the faults of one operation (e.g. to heal the store mid-test).
    pub fn set_faults(&self, operation: Operation, faults: OperationFaults) {
        self.lock().config.faults.insert(operation, faults);
    }

    /// Every fault injected so far, in call order.
    pub fn injected(&self) -> Vec<InjectedFault> {
        self.lock().injected.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Draws the decision for one call and returns it with the delay to add.
    fn decide(&self, operation: Operation, path: &str) -> (Decision, Duration) {
        let mut state = self.lock();
        let call = state.calls;
        state.calls += 1;
        let faults = state.config.faults.get(&operation).copied().unwrap_or_default();
        let draw = state.generator.next_unit();
        let error_until = faults.error_probability;
        let throttle_until = error_until + faults.throttle_probability;
        let timeout_until = throttle_until + faults.timeout_after_success_probability;
        let (decision, kind) = if draw < error_until {
            (Decision::Fail(FaultKind::Error), Some(FaultKind::Error))
        } else if draw < throttle_until {
            (Decision::Fail(FaultKind::Throttle), Some(FaultKind::Throttle))
        } else if draw < timeout_until {
            (Decision::ReportTimeoutAfter, Some(FaultKind::TimeoutAfterSuccess))
        } else {
            (Decision::Pass, None)
        };
        if let Some(kind) = kind {
            state.injected.push(InjectedFault { call, operation, path: path.to_owned(), kind });
        }
        (decision, faults.delay)
    }

    async fn run<T, F>(&self, operation: Operation, path: String, call_inner: F) -> ObjectResult<T>
    where
        F: Future<Output = ObjectResult<T>>,
    {
        let (decision, delay) = self.decide(operation, &path);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let name = operation.name();
        match decision {
            Decision::Pass => call_inner.await,
            Decision::Fail(kind) => Err(injected_error(kind, name, path)),
            Decision::ReportTimeoutAfter => {
                call_inner.await?;
                Err(injected_error(
                    if operation.is_write() { FaultKind::TimeoutAfterSuccess } else { FaultKind::Error },
                    name,
                    path,
                ))
            }
        }
    }
}

fn injected_error(kind: FaultKind, operation: &'static str, path: String) -> ObjectStoreError {
    let detail = "injected by FaultyStore".to_owned();
    match kind {
        FaultKind::Error => ObjectStoreError::Unavailable { operation, path, detail },
        FaultKind::Throttle => ObjectStoreError::Throttled { operation, path, detail },
        FaultKind::TimeoutAfterSuccess => ObjectStoreError::TimedOutAfterSend { operation, path, detail },
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> ObjectResult<()> {
        self.run(Operation::Put, path.to_string(), self.inner.put(path, bytes)).await
    }

    async fn get(&self, path: &ObjectPath) -> ObjectResult<Bytes> {
        self.run(Operation::Get, path.to_string(), self.inner.get(path)).await
    }

    async fn get_range(&self, path: &ObjectPath, range: ByteRange) -> ObjectResult<Bytes> {
        self.run(Operation::GetRange, path.to_string(), self.inner.get_range(path, range)).await
    }

    async fn head(&self, path: &ObjectPath) -> ObjectResult<ObjectMeta> {
        self.run(Operation::Head, path.to_string(), self.inner.head(path)).await
    }

    async fn delete(&self, path: &ObjectPath) -> ObjectResult<()> {
        self.run(Operation::Delete, path.to_string(), self.inner.delete(path)).await
    }

    async fn delete_many(&self, paths: &[ObjectPath]) -> ObjectResult<()> {
        let described = format!("{} objects", paths.len());
        self.run(Operation::DeleteMany, described, self.inner.delete_many(paths)).await
    }

    fn list(
        &self,
        prefix: &ObjectPrefix,
        start_after: Option<&ObjectPath>,
    ) -> BoxStream<'static, ObjectResult<ObjectMeta>> {
        let (decision, delay) = self.decide(Operation::List, prefix.as_str());
        let listing = self.inner.list(prefix, start_after);
        let prefix = prefix.to_string();
        let faulted = match decision {
            Decision::Pass => listing,
            Decision::Fail(kind) => {
                stream::once(async move { Err(injected_error(kind, "list", prefix)) }).boxed()
            }
            // A listing that "times out" after the store answered: the first page is lost.
            Decision::ReportTimeoutAfter => {
                stream::once(async move { Err(injected_error(FaultKind::Error, "list", prefix)) }).boxed()
            }
        };
        if delay.is_zero() {
            faulted
        } else {
            stream::once(async move {
                tokio::time::sleep(delay).await;
                faulted
            })
            .flatten()
            .boxed()
        }
    }

    fn write_once(&self) -> WriteOnce {
        self.inner.write_once()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InMemoryStore;
    use lakestream_format::{ErrorClass, ManualClock};

    fn memory() -> Arc<InMemoryStore> {
        Arc::new(InMemoryStore::new(Arc::new(ManualClock::new(1_700_000_000_000))))
    }

    fn path(i: usize) -> ObjectPath {
        ObjectPath::new(format!("o/{i}")).unwrap()
    }

    #[tokio::test]
    async fn without_faults_it_passes_the_conformance_suite() {
        crate::conformance::run_all(|| async {
            Arc::new(FaultyStore::new(memory(), FaultConfig::new(1))) as Arc<dyn ObjectStore>
        })
        .await;
    }

    async fn put_outcomes(seed: u64) -> Vec<Option<ErrorClass>> {
        let faults = OperationFaults {
            error_probability: 0.2,
            throttle_probability: 0.2,
            timeout_after_success_probability: 0.2,
            delay: Duration::ZERO,
        };
        let store = FaultyStore::new(memory(), FaultConfig::new(seed).with(Operation::Put, faults));
        let mut outcomes = Vec::new();
        for i in 0..200 {
            outcomes.push(store.put(&path(i), Bytes::from_static(b"x")).await.err().map(|e| e.class()));
        }
        outcomes
    }

    #[tokio::test]
    async fn the_same_seed_gives_the_same_faults() {
        let first = put_outcomes(42).await;
        assert_eq!(first, put_outcomes(42).await);
        assert_ne!(first, put_outcomes(43).await, "a different seed should give different faults");
        let count = |class| first.iter().filter(|o| **o == Some(class)).count();
        // 200 draws at 0.4 retryable and 0.2 unknown: far from 0 and from 200.
        assert!((40..=120).contains(&count(ErrorClass::Retryable)), "{}", count(ErrorClass::Retryable));
        assert!(
            (15..=70).contains(&count(ErrorClass::OutcomeUnknown)),
            "{}",
            count(ErrorClass::OutcomeUnknown)
        );
    }

    #[tokio::test]
    async fn timeout_after_success_leaves_the_object_written() {
        let inner = memory();
        let faults = OperationFaults { timeout_after_success_probability: 1.0, ..OperationFaults::default() };
        let store = FaultyStore::new(inner.clone(), FaultConfig::new(7).with(Operation::Put, faults));
        let err = store.put(&path(0), Bytes::from_static(b"data")).await.unwrap_err();
        assert_eq!(err.class(), ErrorClass::OutcomeUnknown, "{err}");
        assert_eq!(inner.get(&path(0)).await.unwrap(), Bytes::from_static(b"data"));
        let recorded = store.injected();
        assert_eq!(recorded.len(), 1);
        assert_eq!((recorded[0].call, recorded[0].kind), (0, FaultKind::TimeoutAfterSuccess));
    }

    #[tokio::test]
    async fn injected_errors_do_not_reach_the_inner_store() {
        let inner = memory();
        let faults = OperationFaults { error_probability: 1.0, ..OperationFaults::default() };
        let store = FaultyStore::new(inner.clone(), FaultConfig::new(7).with_all(faults));
        assert_eq!(store.put(&path(0), Bytes::new()).await.unwrap_err().class(), ErrorClass::Retryable);
        assert!(inner.is_empty());
        let listed: Vec<_> = store.list(&ObjectPrefix::all(), None).collect().await;
        assert!(matches!(listed.as_slice(), [Err(ObjectStoreError::Unavailable { .. })]), "{listed:?}");
        store.set_faults(Operation::Put, OperationFaults::default());
        store.put(&path(0), Bytes::new()).await.unwrap();
        assert_eq!(inner.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn delays_use_tokio_time() {
        let faults = OperationFaults { delay: Duration::from_secs(30), ..OperationFaults::default() };
        let store = FaultyStore::new(memory(), FaultConfig::new(0).with(Operation::Head, faults));
        let started = tokio::time::Instant::now();
        let _ = store.head(&path(0)).await;
        assert!(started.elapsed() >= Duration::from_secs(30));
    }
}
