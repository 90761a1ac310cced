//! The baselines: what the stores do raw, at the same sizes and concurrency as the system
//! under test, on the same stores, in the same run. Also the closed-loop driver both use.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use lakestream_meta::MetaStore;
use lakestream_objstore::{ObjectPath, ObjectPrefix, ObjectStore};

use crate::hist::Histogram;
use crate::meter::Meter;
use crate::{BenchError, err};

/// How much work a phase does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// Run for this long (operations in flight at the deadline complete).
    Time(Duration),
    /// Run this many operations.
    Ops(u64),
}

/// What a phase did.
#[derive(Debug, Clone, Default)]
pub struct OpStats {
    /// Operations completed.
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall time from the first start to the last completion.
    pub elapsed: Duration,
    /// Per-operation latency.
    pub latency: Histogram,
}

impl OpStats {
    /// MB/s (10⁶ bytes).
    pub fn mb_s(&self) -> f64 {
        per_second(self.bytes as f64 / 1e6, self.elapsed)
    }

    /// Operations per second.
    pub fn ops_s(&self) -> f64 {
        per_second(self.ops as f64, self.elapsed)
    }
}

/// `amount / elapsed`, zero for an empty interval.
pub fn per_second(amount: f64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 { amount / s } else { 0.0 }
}

/// Runs `op(worker, sequence)` from `concurrency` tasks, each starting its next operation when
/// the previous one completes, until `load` is done. `op` returns the bytes it moved. The
/// first error stops every worker and is returned.
pub async fn closed_loop<F, Fut>(
    concurrency: usize,
    load: Load,
    meter: &Arc<Meter>,
    op: F,
) -> Result<OpStats, BenchError>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, BenchError>> + Send + 'static,
{
    let op = Arc::new(op);
    let issued = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let deadline = match load {
        Load::Time(d) => Some(started + d),
        Load::Ops(_) => None,
    };
    let limit = match load {
        Load::Ops(n) => n,
        Load::Time(_) => u64::MAX,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..concurrency.max(1) {
        let (op, issued, failed, meter) = (op.clone(), issued.clone(), failed.clone(), meter.clone());
        tasks.spawn(async move {
            let mut latency = Histogram::new();
            let (mut ops, mut bytes) = (0u64, 0u64);
            loop {
                if failed.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let seq = issued.fetch_add(1, Ordering::Relaxed);
                if seq >= limit {
                    break;
                }
                let t = Instant::now();
                match op(worker, seq).await {
                    Ok(b) => {
                        latency.record(t.elapsed());
                        meter.add(b);
                        ops += 1;
                        bytes += b;
                    }
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
            Ok::<_, BenchError>((latency, ops, bytes))
        });
    }
    let mut out = OpStats::default();
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok((latency, ops, bytes))) => {
                out.latency.merge(&latency);
                out.ops += ops;
                out.bytes += bytes;
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(BenchError::Operation {
                    what: "a load task".into(),
                    message: e.to_string(),
                });
            }
        }
    }
    out.elapsed = started.elapsed();
    match first_error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Raw `put`s of `size`-byte objects under `prefix` from `concurrency` tasks.
pub async fn raw_puts(
    store: Arc<dyn ObjectStore>,
    prefix: String,
    size: usize,
    concurrency: usize,
    load: Load,
    meter: &Arc<Meter>,
) -> Result<OpStats, BenchError> {
    let body = Bytes::from(crate::scenarios::pseudo_random(size.max(1), 0xba5e));
    closed_loop(concurrency, load, meter, move |worker, seq| {
        let (store, body, prefix) = (store.clone(), body.clone(), prefix.clone());
        async move {
            let path =
                ObjectPath::new(format!("{prefix}/put/{worker}/{seq}")).map_err(err("baseline path"))?;
            let n = body.len() as u64;
            store.put(&path, body).await.map_err(err(format!("raw PUT {path}")))?;
            Ok(n)
        }
    })
    .await
}

/// One raw `get` of each of `paths` from `concurrency` tasks.
pub async fn raw_gets(
    store: Arc<dyn ObjectStore>,
    paths: Vec<ObjectPath>,
    concurrency: usize,
    meter: &Arc<Meter>,
) -> Result<OpStats, BenchError> {
    let n = paths.len() as u64;
    let paths = Arc::new(paths);
    closed_loop(concurrency, Load::Ops(n), meter, move |_, seq| {
        let (store, paths) = (store.clone(), paths.clone());
        async move {
            let path = &paths[seq as usize];
            let bytes = store.get(path).await.map_err(err(format!("raw GET {path}")))?;
            Ok(bytes.len() as u64)
        }
    })
    .await
}

/// Reads each of `paths` whole from `src` and writes it to `dst` under `prefix`, one object
/// after another (as the compactor works through one log at a time). Counts the bytes once.
pub async fn raw_copies(
    src: Arc<dyn ObjectStore>,
    dst: Arc<dyn ObjectStore>,
    paths: Vec<ObjectPath>,
    prefix: String,
    meter: &Arc<Meter>,
) -> Result<OpStats, BenchError> {
    let n = paths.len() as u64;
    let paths = Arc::new(paths);
    closed_loop(1, Load::Ops(n), meter, move |_, seq| {
        let (src, dst, paths, prefix) = (src.clone(), dst.clone(), paths.clone(), prefix.clone());
        async move {
            let from = &paths[seq as usize];
            let bytes = src.get(from).await.map_err(err(format!("raw GET {from}")))?;
            let n = bytes.len() as u64;
            let to = ObjectPath::new(format!("{prefix}/copy/{seq}")).map_err(err("baseline path"))?;
            dst.put(&to, bytes).await.map_err(err(format!("raw PUT {to}")))?;
            Ok(n)
        }
    })
    .await
}

/// The compaction baseline: what the compactor's reads and writes cost with no Parquet
/// encoding. The WAL objects are read whole, each once, up to `fetch_bytes` ahead in tasks of
/// their own (as the compactor fetches them); each object's bytes are cut into `streams`
/// equal slices, one per output stream (as the compactor writes one file per log of a pass,
/// `concurrent_logs` at once); each stream writes files through streaming uploads and closes
/// one once it holds the next size of `file_sizes` (the compactor's files, dealt round the
/// streams). Repeated until the passes have taken `min_duration`; each pass's files are
/// deleted after it, outside the time measured (so that a long phase does not fill the
/// disk). Ops: files written; bytes: WAL bytes read and written; elapsed: the passes' time.
#[allow(clippy::too_many_arguments)] // the knobs of one measured phase, each named at the call
pub async fn raw_compaction_copies(
    src: Arc<dyn ObjectStore>,
    dst: Arc<dyn ObjectStore>,
    objects: Vec<(ObjectPath, u64)>,
    file_sizes: Vec<u64>,
    streams: usize,
    fetch_bytes: u64,
    prefix: String,
    min_duration: Duration,
    meter: &Arc<Meter>,
) -> Result<OpStats, BenchError> {
    let streams = streams.max(1);
    let file_sizes = if file_sizes.is_empty() { vec![u64::MAX] } else { file_sizes };
    let mut out = OpStats::default();
    for pass in 0u64.. {
        let started = Instant::now();
        let mut senders = Vec::new();
        let mut writers = Vec::new();
        for stream in 0..streams {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(1);
            senders.push(tx);
            let (dst, prefix, file_sizes) = (dst.clone(), prefix.clone(), file_sizes.clone());
            writers.push(async move {
                let mut latency = Histogram::new();
                let (mut files, mut in_file) = (0usize, 0u64);
                let mut upload = None;
                let mut opened = Instant::now();
                while let Some(slice) = rx.recv().await {
                    if upload.is_none() {
                        let to = ObjectPath::new(format!("{prefix}/copy/{pass}-{stream}-{files}"))
                            .map_err(err("baseline path"))?;
                        upload = Some(dst.start_upload(&to).await.map_err(err(format!("raw upload {to}")))?);
                        opened = Instant::now();
                    }
                    in_file += slice.len() as u64;
                    if let Some(u) = upload.as_mut() {
                        u.write(slice).await.map_err(err("raw upload write"))?;
                    }
                    if in_file >= file_sizes[(stream + files * streams) % file_sizes.len()] {
                        if let Some(u) = upload.take() {
                            u.complete().await.map_err(err("raw upload complete"))?;
                        }
                        latency.record(opened.elapsed());
                        files += 1;
                        in_file = 0;
                    }
                }
                if let Some(u) = upload.take() {
                    u.complete().await.map_err(err("raw upload complete"))?;
                    latency.record(opened.elapsed());
                    files += 1;
                }
                Ok::<_, BenchError>((files, latency))
            });
        }
        let driver = async {
            let mut window: std::collections::VecDeque<(u64, tokio::task::JoinHandle<_>)> =
                Default::default();
            let mut in_window = 0u64;
            let mut next = objects.iter();
            let mut copied = 0u64;
            loop {
                while window.is_empty() || in_window < fetch_bytes {
                    let Some((path, size)) = next.next() else { break };
                    let (src, path) = (src.clone(), path.clone());
                    window.push_back((*size, tokio::spawn(async move { src.get(&path).await })));
                    in_window += size;
                }
                let Some((size, task)) = window.pop_front() else { break };
                in_window -= size;
                let bytes = task
                    .await
                    .map_err(|e| BenchError::Operation { what: "raw GET".into(), message: e.to_string() })?
                    .map_err(err("raw GET of a WAL object"))?;
                let len = bytes.len();
                for (stream, tx) in senders.iter().enumerate() {
                    let slice = bytes.slice(stream * len / streams..(stream + 1) * len / streams);
                    if tx.send(slice).await.is_err() {
                        return Ok(copied); // a writer failed; its error is reported
                    }
                }
                meter.add(len as u64);
                copied += len as u64;
            }
            drop(senders);
            Ok::<_, BenchError>(copied)
        };
        let (copied, written) = futures::future::join(driver, futures::future::join_all(writers)).await;
        for w in written {
            let (files, latency) = w?;
            out.ops += files as u64;
            out.latency.merge(&latency);
        }
        out.bytes += copied?;
        out.elapsed += started.elapsed();
        remove_prefix(&*dst, &format!("{prefix}/copy/")).await?;
        if out.elapsed >= min_duration {
            break;
        }
    }
    Ok(out)
}

/// The partition and key prefix of baseline worker `worker`'s sequenced puts.
fn sequence_keys(run: &str, worker: usize) -> (String, String) {
    (format!("bench-baseline-{run}-{worker}"), format!("/bench-baseline/{run}/{worker}"))
}

/// Raw sequenced puts of `value_bytes`-byte values from `concurrency` tasks, each on its own
/// key sequence (as the writer publishes each log's index in its own sequence). The deltas
/// are (1 record, `delta_bytes`), as an index record's.
pub async fn raw_sequenced_puts(
    meta: Arc<dyn MetaStore>,
    run: String,
    concurrency: usize,
    value_bytes: usize,
    delta_bytes: u64,
    load: Load,
    meter: &Arc<Meter>,
) -> Result<OpStats, BenchError> {
    raw_sequenced_puts_over(meta, run, concurrency, concurrency, value_bytes, delta_bytes, load, meter).await
}

/// Raw sequenced puts as [`raw_sequenced_puts`], but over `sequences` key sequences from
/// `concurrency` tasks (task `w` on sequence `w % sequences`): with more tasks than
/// sequences, several puts of one sequence are in flight at once (pipelined, as a client
/// may issue them). [`remove_sequences`] with `sequences` removes them.
#[allow(clippy::too_many_arguments)] // the knobs of one measured phase, each named at the call
pub async fn raw_sequenced_puts_over(
    meta: Arc<dyn MetaStore>,
    run: String,
    sequences: usize,
    concurrency: usize,
    value_bytes: usize,
    delta_bytes: u64,
    load: Load,
    meter: &Arc<Meter>,
) -> Result<OpStats, BenchError> {
    let value = Bytes::from(vec![0x17; value_bytes]);
    let sequences = sequences.max(1);
    closed_loop(concurrency, load, meter, move |worker, _| {
        let (meta, value, run) = (meta.clone(), value.clone(), run.clone());
        async move {
            let (partition, prefix) = sequence_keys(&run, worker % sequences);
            let n = value.len() as u64;
            meta.sequenced_put(&partition, &prefix, &[1, delta_bytes.max(1)], value)
                .await
                .map_err(err("raw sequenced put"))?;
            Ok(n)
        }
    })
    .await
}

/// Raw plain (unconditional) puts of `value_bytes`-byte values to fresh keys from
/// `concurrency` tasks, task `w` in the same partition as [`raw_sequenced_puts`]' task `w`:
/// what a metadata write costs without the sequencing. [`remove_sequences`] removes them.
pub async fn raw_plain_puts(
    meta: Arc<dyn MetaStore>,
    run: String,
    concurrency: usize,
    value_bytes: usize,
    load: Load,
    meter: &Arc<Meter>,
) -> Result<OpStats, BenchError> {
    let value = Bytes::from(vec![0x17; value_bytes]);
    closed_loop(concurrency, load, meter, move |worker, seq| {
        let (meta, value, run) = (meta.clone(), value.clone(), run.clone());
        async move {
            let (partition, prefix) = sequence_keys(&run, worker);
            let n = value.len() as u64;
            meta.put(&partition, &format!("{prefix}-{seq:020}"), value, lakestream_meta::PutCondition::None)
                .await
                .map_err(err("raw plain put"))?;
            Ok(n)
        }
    })
    .await
}

/// How many records [`raw_sequenced_puts`] (over `sequences`) or [`raw_plain_puts`] (from
/// `sequences` tasks) left in the store: a check that every acknowledged put was stored.
pub async fn count_sequences(meta: &dyn MetaStore, run: &str, sequences: usize) -> Result<u64, BenchError> {
    let mut n = 0u64;
    for worker in 0..sequences.max(1) {
        let (partition, prefix) = sequence_keys(run, worker);
        n += meta
            .list(&partition, &format!("{prefix}-"), &format!("{prefix}."))
            .await
            .map_err(err("counting the baseline's records"))?
            .len() as u64;
    }
    Ok(n)
}

/// Removes the records [`raw_sequenced_puts`] wrote (not timed).
pub async fn remove_sequences(meta: &dyn MetaStore, run: &str, concurrency: usize) -> Result<(), BenchError> {
    for worker in 0..concurrency.max(1) {
        let (partition, prefix) = sequence_keys(run, worker);
        // Keys are `{prefix}-…`; `.` sorts right after `-`.
        meta.delete_range(&partition, &format!("{prefix}-"), &format!("{prefix}."))
            .await
            .map_err(err("removing the baseline's sequenced records"))?;
    }
    Ok(())
}

/// Every object under `prefix` (all of the store for an empty prefix).
pub async fn list(
    store: &dyn ObjectStore,
    prefix: &str,
) -> Result<Vec<lakestream_objstore::ObjectMeta>, BenchError> {
    let prefix = ObjectPrefix::new(prefix).map_err(err("list prefix"))?;
    let listed: Vec<_> = store.list(&prefix, None).collect().await;
    listed.into_iter().map(|m| m.map_err(err("listing objects"))).collect()
}

/// Deletes every object under `prefix` (not timed).
pub async fn remove_prefix(store: &dyn ObjectStore, prefix: &str) -> Result<(), BenchError> {
    let paths: Vec<ObjectPath> = list(store, prefix).await?.into_iter().map(|m| m.path).collect();
    store.delete_many(&paths).await.map_err(err("removing baseline objects"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_meta::InMemoryStore as MemMeta;
    use lakestream_objstore::InMemoryStore as MemObjects;

    #[tokio::test]
    async fn baselines_do_what_they_say_and_clean_up() {
        let store: Arc<dyn ObjectStore> =
            Arc::new(MemObjects::new(Arc::new(lakestream_format::ManualClock::new(0))));
        let meter = Meter::new();
        let puts = raw_puts(store.clone(), "b/r1".into(), 1000, 3, Load::Ops(10), &meter).await.unwrap();
        assert_eq!((puts.ops, puts.bytes, puts.latency.count()), (10, 10_000, 10));
        let paths: Vec<ObjectPath> =
            list(&*store, "b/r1/put/").await.unwrap().into_iter().map(|m| m.path).collect();
        assert_eq!(paths.len(), 10);
        let gets = raw_gets(store.clone(), paths.clone(), 4, &meter).await.unwrap();
        assert_eq!((gets.ops, gets.bytes), (10, 10_000));
        let copies = raw_copies(store.clone(), store.clone(), paths, "b/r1".into(), &meter).await.unwrap();
        assert_eq!((copies.ops, copies.bytes), (10, 10_000));
        assert_eq!(list(&*store, "b/r1/copy/").await.unwrap().len(), 10);
        // 10 objects of 1000 bytes over 3 streams, files closed at 1500 bytes or more: each
        // stream gets a third of every object, so a file per 5 objects, two per stream.
        let sized: Vec<(ObjectPath, u64)> =
            list(&*store, "b/r1/put/").await.unwrap().into_iter().map(|m| (m.path, m.size)).collect();
        let copied = raw_compaction_copies(
            store.clone(),
            store.clone(),
            sized,
            vec![1500],
            3,
            2500,
            "b/r2".into(),
            Duration::ZERO,
            &meter,
        )
        .await
        .unwrap();
        assert_eq!((copied.ops, copied.bytes), (6, 10_000));
        assert!(list(&*store, "b/r2/").await.unwrap().is_empty(), "each pass's files are deleted");
        assert_eq!(meter.read(), (40_000, 40), "puts, gets, copies and the compaction copy's reads");
        remove_prefix(&*store, "b/r1/").await.unwrap();
        remove_prefix(&*store, "b/r2/").await.unwrap();
        assert!(list(&*store, "").await.unwrap().is_empty());

        let meta: Arc<dyn MetaStore> = Arc::new(MemMeta::new());
        let seq =
            raw_sequenced_puts(meta.clone(), "r1".into(), 2, 64, 100, Load::Ops(6), &meter).await.unwrap();
        assert_eq!(seq.ops, 6);
        let count = async |worker| {
            let (partition, prefix) = sequence_keys("r1", worker);
            meta.list(&partition, &format!("{prefix}-"), &format!("{prefix}.")).await.unwrap().len()
        };
        assert_eq!(count(0).await + count(1).await, 6);
        remove_sequences(&*meta, "r1", 2).await.unwrap();
        assert_eq!(count(0).await + count(1).await, 0);
    }

    #[tokio::test]
    async fn the_first_error_stops_the_loop() {
        let meter = Meter::new();
        let out = closed_loop(4, Load::Time(Duration::from_secs(30)), &meter, |_, seq| async move {
            if seq == 5 {
                Err(BenchError::Operation { what: "op".into(), message: "boom".into() })
            } else {
                tokio::task::yield_now().await;
                Ok(1)
            }
        })
        .await;
        assert!(
            matches!(out, Err(BenchError::Operation { ref message, .. }) if message == "boom"),
            "{out:?}"
        );
    }

    #[test]
    fn rates_of_an_empty_interval_are_zero() {
        assert_eq!(per_second(5.0, Duration::ZERO), 0.0);
        assert_eq!(per_second(5.0, Duration::from_millis(500)), 10.0);
    }
}
