//! The catalog suite's hooks on a [`HookedStore`]: an audit of every stream layout the
//! catalog publishes, interleaved calls, injected failures, and a fence landing at a chosen
//! moment.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lakestream_catalog::records::{CatalogRecord, StreamRecord, StreamState, log_key};
use lakestream_format::{LogId, keys};
use lakestream_meta::hooked::{Call, Hook, HookedStore, Op};
use lakestream_meta::{Comparison, MetaError, MetaStore, lease};

/// What the hooks of [`audited`] found, and the switch that interleaves calls.
#[derive(Debug, Default)]
pub struct Audit {
    catalog_partition: String,
    /// Committed layout puts that named a log without a log record.
    violations: Mutex<Vec<String>>,
    /// How many live stream-record puts the audit checked.
    layouts_checked: AtomicUsize,
    interleave: AtomicBool,
}

impl Audit {
    /// From now on, yield to the scheduler before every operation, so that concurrent tasks
    /// interleave between a read and the write that depends on it.
    pub fn interleave(&self) {
        self.interleave.store(true, Ordering::SeqCst);
    }

    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    pub fn layouts_checked(&self) -> usize {
        self.layouts_checked.load(Ordering::SeqCst)
    }

    /// Spec: a layout is published only after the log of every partition exists. For a
    /// live stream's record, the logs of the layout about to be written that have no log
    /// record yet. Checked just before the put and reported only if the put then commits: a
    /// committed write of a live record cannot have raced a purge of its logs, which starts
    /// only after the record left the active state.
    async fn missing_logs_of_layout(&self, inner: &dyn MetaStore, call: &Call) -> Vec<String> {
        let (key, value) = (&call.key, call.value.as_ref().expect("a put's value"));
        let Ok(record) = StreamRecord::decode(key, value) else {
            return vec![format!("{key}: undecodable stream record")];
        };
        // A tombstone's layout is history: the logs it names are being, or have been, deleted.
        if record.state != StreamState::Active {
            return Vec::new();
        }
        self.layouts_checked.fetch_add(1, Ordering::SeqCst);
        let mut missing = Vec::new();
        for &id in &record.layout {
            let registered = inner.get(&self.catalog_partition, &log_key(LogId(id))).await;
            if !matches!(registered, Ok(Some(_))) {
                missing.push(format!("{key}: layout names log {id} without a record"));
            }
        }
        missing
    }
}

/// `store` behind a [`HookedStore`] that audits every stream layout put (and interleaves
/// calls once asked to).
pub fn audited(store: Arc<dyn MetaStore>, catalog_partition: &str) -> (Arc<HookedStore>, Arc<Audit>) {
    let hooked = HookedStore::new(store);
    let audit = Arc::new(Audit { catalog_partition: catalog_partition.to_owned(), ..Audit::default() });
    let switch = audit.clone();
    hooked.on_any(&Op::STORE).when(move |_| switch.interleave.load(Ordering::SeqCst)).run(|_, _| async {
        tokio::task::yield_now().await;
        Ok(())
    });
    let auditor = audit.clone();
    hooked.on(Op::Put).key_prefix("/lakestream-catalog/streams/").around(move |call, next| {
        let (audit, inner) = (auditor.clone(), next.inner().clone());
        Box::pin(async move {
            let missing = audit.missing_logs_of_layout(inner.as_ref(), &call).await;
            let answer = next.forward().await;
            if answer.is_ok() {
                audit.violations.lock().unwrap().extend(missing);
            }
            answer
        })
    });
    (hooked, audit)
}

/// Puts whose key starts with `key_prefix` fail (`Unavailable`, not sent) once `successes`
/// of them went through, until the hook is removed.
pub fn fail_puts_after(hooked: &HookedStore, key_prefix: &str, successes: u64) -> Hook {
    let failure = MetaError::Unavailable(format!("injected failure of puts under {key_prefix}"));
    hooked.on(Op::Put).key_prefix(key_prefix).skip(successes).fail(failure)
}

/// Before the next `Get` of this log's fence, installs the fence: the catalog's fence landing
/// between a writer's lease-record create and its fence read.
pub fn fence_before_next_fence_read(hooked: &HookedStore, log_id: LogId) {
    hooked
        .on(Op::Get)
        .key(keys::fence_key(log_id))
        .when(|call| call.cmp == Some(Comparison::Equal))
        .once()
        .run(move |inner, _| async move { lease::fence(inner.as_ref(), log_id).await });
}
