//! The scenarios. Each opens a fresh stream on the shared [`BenchContext`], measures its
//! path, then its baselines on the same stores, and returns a [`ScenarioReport`].
//!
//! - **produce**: appends through the writer at saturation (closed loop, as fast as the
//!   in-flight bound allows), then open loop at 70 % of that rate and at 5 MiB/s (latency
//!   counts from each entry's scheduled time, so a stall is not hidden by the producers
//!   waiting); with `rate` set, one open-loop phase at that rate. Baselines: raw PUTs of
//!   `flush_bytes` objects at the writer's upload concurrency, raw PUTs of 4 MiB × 8 (fixed,
//!   so that small objects cannot lower the bar), raw sequenced puts at one sequence per log.
//!   CPU per MiB acknowledged counts this process and the S3 server's ([`S3_PID_ENV`]).
//! - **consume** (`consume.rs`): reads as clients see them, over HTTP and gRPC: cold
//!   (bytes fetched from storage beside bytes delivered), cached (per CPU second), compacted
//!   and a one-log catch-up, each against raw GETs of the same objects at the same concurrency.
//! - **compact**: writes a data set, compacts every log (the compactor's WAL GETs and bytes
//!   counted); baseline: the same WAL objects read once each and written back as files of the
//!   compactor's sizes, as many at once as the compactor writes, with no encoding.
//! - **events**: CloudEvents ingestion with deduplication against plain produce.
//! - **meta**: the metadata store's own sequenced puts and plain puts, raw ([`crate::meta`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lakestream_compactor::{Compactor, CompactorConfig, CompactorDeps, Progress};
use lakestream_format::{Clock, LogId, LogRef, SystemClock};
use lakestream_meta::lease::RandomTokens;
use lakestream_objstore::{CountingStore, Counts, ObjectMeta, ObjectPath};
use lakestream_service::config::{MetadataConfig, ObjectStoreConfig};
use lakestream_service::testkit::Stack;

use crate::BenchConfig;
use lakestream_writer::Writer;
use serde::{Deserialize, Serialize};

use crate::baseline::{self, Load, OpStats, per_second};
use crate::hist::Histogram;
use crate::meter::{Goal, Meter, Sampler};
use crate::report::{Figure, Latency, Ratio, ScenarioReport, Target};
use crate::{BenchError, Knobs, err};

/// A scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// Appends through the writer.
    Produce,
    /// Reads back, cold and cached.
    Consume,
    /// Compaction of written data.
    Compact,
    /// CloudEvents ingestion with deduplication.
    Events,
    /// The metadata store's own sequenced and plain puts, raw (the baseline of publishing).
    Meta,
}

impl Scenario {
    /// Every scenario, in the order `all` runs them (produce first, so that its RSS is the
    /// least affected by earlier scenarios' allocations).
    pub const ALL: [Scenario; 5] =
        [Scenario::Produce, Scenario::Consume, Scenario::Compact, Scenario::Events, Scenario::Meta];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Produce => "produce",
            Scenario::Consume => "consume",
            Scenario::Compact => "compact",
            Scenario::Events => "events",
            Scenario::Meta => "meta",
        }
    }
}

/// What every scenario of a run shares: one stack, opened once from the configuration with
/// the knobs applied.
#[derive(Debug)]
pub struct BenchContext {
    /// The stack under test.
    pub stack: Stack,
    /// Its configuration, knobs applied.
    pub config: BenchConfig,
    /// The knobs.
    pub knobs: Knobs,
    /// A name for this run's streams and baseline objects (letters, digits, `-`).
    pub run_id: String,
    /// Whether to draw progress bars on stderr.
    pub progress: bool,
    stores: String,
}

impl BenchContext {
    /// Applies the knobs to `config` and opens the stack. Object stores on S3 get a
    /// `bench-{run_id}` key prefix below the configured one, so runs never see each other's
    /// objects.
    pub async fn open(
        config: BenchConfig,
        knobs: Knobs,
        run_id: &str,
        progress: bool,
    ) -> Result<BenchContext, BenchError> {
        BenchContext::open_for(config, knobs, run_id, progress, true).await
    }

    /// As [`BenchContext::open`], with the writer role on only if `writer`: a process that
    /// measures reads or compaction of a data set another process wrote has no writer, so
    /// that its memory is the reader's or the compactor's.
    pub async fn open_for(
        mut config: BenchConfig,
        knobs: Knobs,
        run_id: &str,
        progress: bool,
        writer: bool,
    ) -> Result<BenchContext, BenchError> {
        knobs.validate()?;
        if run_id.is_empty() || !run_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(BenchError::Knob {
                knob: "run-id",
                message: format!("{run_id:?}: use letters, digits and -"),
            });
        }
        if let Some(ms) = knobs.flush_window_ms {
            config.service.writer.flush_window = Duration::from_millis(ms);
        }
        if let Some(bytes) = knobs.in_flight_bytes {
            config.service.writer.max_in_flight_bytes = bytes;
        }
        config.service.writer.max_in_flight_bytes =
            config.service.writer.max_in_flight_bytes.max(knobs.entry_bytes);
        // The writer admits no entry larger than its in-flight bound; a small bound for a small
        // run lowers the largest entry accepted rather than being refused.
        config.service.writer.max_entry_bytes =
            config.service.writer.max_entry_bytes.min(config.service.writer.max_in_flight_bytes);
        config.service.roles.writer = writer;
        config.service.roles.reader = true;
        // The compact scenario builds its own compactor (with ranges closing at once).
        config.service.roles.compactor = false;
        let per_run = |prefix: &Option<String>| {
            let base = prefix.as_deref().unwrap_or("").trim_end_matches('/');
            Some(if base.is_empty() { format!("bench-{run_id}") } else { format!("{base}/bench-{run_id}") })
        };
        for root in [&mut config.service.storage.wal, &mut config.service.storage.compacted] {
            match root {
                ObjectStoreConfig::Local { .. } => {}
                ObjectStoreConfig::S3(s3) => s3.prefix = per_run(&s3.prefix),
                // A root given as a URL keeps its prefix there.
                ObjectStoreConfig::Gcs(gcs) => match &mut gcs.url {
                    Some(url) => *url = format!("{}/bench-{run_id}", url.trim_end_matches('/')),
                    None => gcs.prefix = per_run(&gcs.prefix),
                },
                ObjectStoreConfig::Azure(azure) => match &mut azure.url {
                    Some(url) => *url = format!("{}/bench-{run_id}", url.trim_end_matches('/')),
                    None => azure.prefix = per_run(&azure.prefix),
                },
            }
        }
        let stores = describe_stores(&config);
        let stack = Stack::open(&config.service).await?;
        Ok(BenchContext { stack, config, knobs, run_id: run_id.into(), progress, stores })
    }

    /// Releases the writer's leases and flushes what is pending.
    pub async fn close(&self) {
        self.stack.close().await;
    }

    pub(crate) fn writer(&self) -> Result<&Writer, BenchError> {
        self.stack.writer.as_ref().ok_or_else(|| BenchError::Config("the writer role is off".into()))
    }

    /// Closed-loop producers: the knob, or enough to keep the in-flight bound full (by
    /// Little's law, throughput is what is in flight over the latency).
    pub(crate) fn producers(&self) -> usize {
        match self.knobs.concurrency {
            0 => (self.config.service.writer.max_in_flight_bytes / self.knobs.entry_bytes).clamp(1, 4096),
            n => n,
        }
    }

    pub(crate) fn load(&self) -> Load {
        if self.knobs.count > 0 { Load::Ops(self.knobs.count) } else { Load::Time(self.knobs.duration()) }
    }

    /// What `consume` and `compact` write before measuring.
    pub(crate) fn data_load(&self) -> Load {
        match self.knobs.data_mib {
            0 => self.load(),
            mib => Load::Ops(((mib << 20) / self.knobs.entry_bytes as u64).max(1)),
        }
    }

    pub(crate) fn goal(&self) -> Goal {
        match self.load() {
            Load::Ops(n) => Goal::Ops(n),
            Load::Time(d) => Goal::Time(d),
        }
    }

    /// The baselines run about half as long as the measured phase (at least 2 s, never
    /// longer than the phase), or as many operations as the phase made.
    fn baseline_load(&self, ops: u64) -> Load {
        match self.load() {
            Load::Ops(_) => Load::Ops(ops.max(4)),
            Load::Time(d) => Load::Time((d / 2).max(d.min(Duration::from_secs(2)))),
        }
    }

    /// One phase of the `meta` scenario: as long as a baseline (half the measured phase, at
    /// least 2 s, never longer than the phase), or `--count` operations.
    pub(crate) fn phase_load(&self) -> Load {
        match self.load() {
            Load::Ops(n) => Load::Ops(n),
            Load::Time(_) => self.baseline_load(0),
        }
    }

    fn baseline_prefix(&self) -> String {
        format!("bench-baseline/{}", self.run_id)
    }

    pub(crate) async fn create_stream(&self, scenario: Scenario) -> Result<Vec<LogRef>, BenchError> {
        let name = format!("bench-{}-{}", scenario.name(), self.run_id);
        let stream = self
            .stack
            .catalog
            .create_stream(lakestream_service::DEFAULT_NAMESPACE, &name, self.knobs.logs, Default::default())
            .await
            .map_err(err(format!("creating stream {name}")))?;
        (0..stream.partition_count())
            .map(|p| {
                stream
                    .log_ref(p)
                    .ok_or_else(|| BenchError::Config(format!("stream {name} has no partition {p}")))
            })
            .collect()
    }

    pub(crate) fn report(&self, scenario: Scenario) -> ScenarioReport {
        ScenarioReport {
            scenario: scenario.name().into(),
            stores: self.stores.clone(),
            knobs: self.knobs.clone(),
            flush_window_ms: u64::try_from(self.config.service.writer.flush_window.as_millis())
                .unwrap_or(u64::MAX),
            in_flight_bytes: self.config.service.writer.max_in_flight_bytes,
            figures: Vec::new(),
            latencies: Vec::new(),
            ratios: Vec::new(),
            samples: Vec::new(),
            targets: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub(crate) fn sampler(&self, meter: &Arc<Meter>, label: &str, goal: Goal) -> Sampler {
        Sampler::start(meter.clone(), label.into(), goal, self.progress)
    }
}

fn describe_stores(config: &BenchConfig) -> String {
    let objects = |c: &ObjectStoreConfig| match c {
        ObjectStoreConfig::Local { .. } => "local disk".to_string(),
        ObjectStoreConfig::S3(s3) => {
            format!("S3 at {}", s3.endpoint.as_deref().unwrap_or("the default endpoint"))
        }
        ObjectStoreConfig::Gcs(gcs) => {
            format!("GCS at {}", gcs.endpoint.as_deref().unwrap_or("the default endpoint"))
        }
        ObjectStoreConfig::Azure(azure) => {
            format!("Azure Blob at {}", azure.endpoint.as_deref().unwrap_or("the default endpoint"))
        }
    };
    let meta = match &config.service.metadata {
        MetadataConfig::Embedded { .. } => "embedded (redb)",
        MetadataConfig::Memory => "in-memory",
        MetadataConfig::Oxia { .. } => "Oxia",
    };
    format!("objects: {}, metadata: {meta}", objects(&config.service.storage.wal))
}

/// Runs one scenario in this process: [`prepare`], then [`measure`].
pub async fn run(ctx: &BenchContext, scenario: Scenario) -> Result<ScenarioReport, BenchError> {
    let data = prepare(ctx, scenario).await?;
    measure(ctx, scenario, data).await
}

impl Scenario {
    /// Whether the scenario writes a data set before measuring ([`prepare`]): `consume` and
    /// `compact`, which measure reads and compaction, not the writer.
    pub fn has_data_set(self) -> bool {
        matches!(self, Scenario::Consume | Scenario::Compact)
    }
}

/// Writes the data sets `scenario` measures (`consume`: the data set and the catch-up log;
/// `compact`: the data set); nothing for the others. [`measure`] may run in another process
/// on the same stores (`lakestream bench` runs it in a fresh one, so that the writer's memory
/// is not the reader's or the compactor's).
pub async fn prepare(ctx: &BenchContext, scenario: Scenario) -> Result<Vec<DataSet>, BenchError> {
    match scenario {
        Scenario::Consume => crate::consume::prepare(ctx).await,
        Scenario::Compact => {
            let (logs, appended, written) = write_data_set(ctx, Scenario::Compact).await?;
            let payload = appended.stats.bytes + logs.len() as u64 * WARM_UP.len() as u64;
            Ok(vec![DataSet::new(&logs, appended.ends, payload, &written)])
        }
        Scenario::Produce | Scenario::Events | Scenario::Meta => Ok(Vec::new()),
    }
}

/// Measures `scenario` over the data sets [`prepare`] wrote.
pub async fn measure(
    ctx: &BenchContext,
    scenario: Scenario,
    data: Vec<DataSet>,
) -> Result<ScenarioReport, BenchError> {
    match scenario {
        Scenario::Produce => produce(ctx).await,
        Scenario::Consume => crate::consume::measure(ctx, data).await,
        Scenario::Compact => {
            let [set] = <[DataSet; 1]>::try_from(data).map_err(|d| {
                BenchError::Config(format!("the compact scenario measures one data set, {} given", d.len()))
            })?;
            compact(ctx, &set.logs(), set.objects()?).await
        }
        Scenario::Events => crate::events::run(ctx).await,
        Scenario::Meta => crate::meta::run(ctx).await,
    }
}

/// A data set one process wrote for another to measure: its stream's logs in partition
/// order, their end offsets, the payload appended (warm-up entries included) and the WAL
/// objects written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSet {
    /// The stream's namespace.
    pub namespace: String,
    /// The stream's name.
    pub stream: String,
    /// Its logs' IDs, by partition.
    pub log_ids: Vec<u64>,
    /// Each log's end offset.
    pub ends: Vec<u64>,
    /// Payload bytes appended.
    pub payload: u64,
    /// The WAL objects written: path and size in bytes.
    pub objects: Vec<(String, u64)>,
}

impl DataSet {
    pub(crate) fn new(logs: &[LogRef], ends: Vec<u64>, payload: u64, written: &[ObjectMeta]) -> DataSet {
        let first = logs.first();
        DataSet {
            namespace: first.map(|l| l.namespace.clone()).unwrap_or_default(),
            stream: first.map(|l| l.stream.clone()).unwrap_or_default(),
            log_ids: logs.iter().map(|l| l.log_id.0).collect(),
            ends,
            payload,
            objects: written.iter().map(|m| (m.path.to_string(), m.size)).collect(),
        }
    }

    pub(crate) fn logs(&self) -> Vec<LogRef> {
        let log = |id: &u64| LogRef {
            log_id: LogId(*id),
            namespace: self.namespace.clone(),
            stream: self.stream.clone(),
        };
        self.log_ids.iter().map(log).collect()
    }

    pub(crate) fn objects(&self) -> Result<Vec<ObjectMeta>, BenchError> {
        self.objects
            .iter()
            .map(|(path, size)| {
                let path = ObjectPath::new(path.clone())
                    .map_err(|e| BenchError::Config(format!("data set object {path:?}: {e}")))?;
                Ok(ObjectMeta { path, size: *size, last_modified_ms: 0 })
            })
            .collect()
    }
}

/// `len` pseudo-random (incompressible) bytes from `seed` (xorshift64).
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Distinct incompressible payloads to rotate through: identical entries close together
/// would let the Parquet codec find repeats no real stream has. At most 16 MiB in all.
pub(crate) fn payload_pool(entry_bytes: usize) -> Arc<Vec<Bytes>> {
    let n = ((16usize << 20) / entry_bytes.max(1)).clamp(1, 64);
    Arc::new((0..n).map(|i| Bytes::from(pseudo_random(entry_bytes, i as u64 + 1))).collect())
}

/// What an append load did.
pub(crate) struct Appended {
    pub(crate) stats: OpStats,
    /// The end offset of each log (index as in the `logs` given).
    pub(crate) ends: Vec<u64>,
    /// CPU seconds the process used during the load.
    cpu_s: Option<f64>,
}

/// The payload of the warm-up entries.
pub(crate) const WARM_UP: &[u8] = b"warm-up";

/// One small append per log, so that taking the leases is not measured. All at once: one
/// after another, each would wait for its own flush window (10,000 logs × 250 ms = 42 min).
pub(crate) async fn warm_up(writer: &Writer, logs: &[LogRef]) -> Result<Vec<u64>, BenchError> {
    let appends = logs.iter().map(|log| async move {
        writer
            .append(log.log_id, Bytes::from_static(WARM_UP), 1)
            .await
            .map(|ack| ack.end_offset())
            .map_err(err(format!("warm-up append to log {}", log.log_id)))
    });
    futures::future::try_join_all(appends).await
}

/// Drives appends over `logs` as the knobs say (closed or open loop) until the load is done.
pub(crate) async fn append_load(
    ctx: &BenchContext,
    logs: &[LogRef],
    meter: &Arc<Meter>,
    ends: Vec<u64>,
    load: Load,
) -> Result<Appended, BenchError> {
    append_load_at(ctx, logs, meter, ends, load, ctx.knobs.rate).await
}

/// Drives appends over `logs` closed loop (`rate` 0) or open loop at `rate` entries/s.
async fn append_load_at(
    ctx: &BenchContext,
    logs: &[LogRef],
    meter: &Arc<Meter>,
    ends: Vec<u64>,
    load: Load,
    rate: u64,
) -> Result<Appended, BenchError> {
    let writer = ctx.writer()?.clone();
    let pool = payload_pool(ctx.knobs.entry_bytes);
    let ends: Arc<Vec<AtomicU64>> = Arc::new(ends.into_iter().map(AtomicU64::new).collect());
    let log_ids: Arc<Vec<_>> = Arc::new(logs.iter().map(|l| l.log_id).collect());
    let cpu_before = crate::sys::cpu_seconds();
    let append = {
        let ends = ends.clone();
        move |seq: u64| {
            let (writer, pool, ends, log_ids) = (writer.clone(), pool.clone(), ends.clone(), log_ids.clone());
            async move {
                let i = (seq % log_ids.len() as u64) as usize;
                let payload = pool[(seq % pool.len() as u64) as usize].clone();
                let n = payload.len() as u64;
                let ack = writer
                    .append(log_ids[i], payload, 1)
                    .await
                    .map_err(err(format!("append to log {}", log_ids[i])))?;
                ends[i].fetch_max(ack.end_offset(), Ordering::Relaxed);
                Ok::<u64, BenchError>(n)
            }
        }
    };
    let stats = if rate == 0 {
        baseline::closed_loop(ctx.producers(), load, meter, move |_, seq| append(seq)).await?
    } else {
        open_loop(rate, load, meter, append).await?
    };
    let cpu_s = cpu_before.zip(crate::sys::cpu_seconds()).map(|(a, b)| b - a);
    let ends = ends.iter().map(|e| e.load(Ordering::Relaxed)).collect();
    Ok(Appended { stats, ends, cpu_s })
}

/// Starts operation `k` at `k / rate` seconds whatever the earlier ones are doing, and
/// times it from that scheduled start.
async fn open_loop<F, Fut>(rate: u64, load: Load, meter: &Arc<Meter>, op: F) -> Result<OpStats, BenchError>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<u64, BenchError>> + Send + 'static,
{
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let started = tokio::time::Instant::now();
    let latency = Arc::new(Mutex::new(Histogram::new()));
    let mut tasks = tokio::task::JoinSet::new();
    let mut issued = 0u64;
    let mut out = OpStats::default();
    let reap = |r: Result<Result<u64, BenchError>, tokio::task::JoinError>, out: &mut OpStats| match r {
        Ok(Ok(bytes)) => {
            out.ops += 1;
            out.bytes += bytes;
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(e) => Err(BenchError::Operation { what: "a load task".into(), message: e.to_string() }),
    };
    loop {
        let now = tokio::time::Instant::now();
        let elapsed = now.duration_since(started);
        let (due, done) = match load {
            Load::Time(d) => ((elapsed.as_secs_f64() * rate as f64) as u64 + 1, elapsed >= d),
            Load::Ops(n) => (((elapsed.as_secs_f64() * rate as f64) as u64 + 1).min(n), issued >= n),
        };
        if done {
            break;
        }
        while issued < due {
            let scheduled = started + interval.mul_f64(issued as f64);
            let fut = op(issued);
            let (latency, meter) = (latency.clone(), meter.clone());
            tasks.spawn(async move {
                let bytes = fut.await?;
                let took = tokio::time::Instant::now().duration_since(scheduled);
                latency.lock().unwrap_or_else(|e| e.into_inner()).record(took);
                meter.add(bytes);
                Ok(bytes)
            });
            issued += 1;
        }
        while let Some(r) = tasks.try_join_next() {
            reap(r, &mut out)?;
        }
        tokio::time::sleep_until(started + interval.mul_f64(issued as f64)).await;
    }
    while let Some(r) = tasks.join_next().await {
        reap(r, &mut out)?;
    }
    out.elapsed = started.elapsed();
    out.latency = std::mem::take(&mut *latency.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(out)
}

/// The paths of every WAL object.
pub(crate) async fn wal_paths(ctx: &BenchContext) -> Result<HashSet<String>, BenchError> {
    Ok(baseline::list(&*ctx.stack.wal, "").await?.into_iter().map(|m| m.path.to_string()).collect())
}

/// The WAL objects that are not in `before`.
pub(crate) async fn new_wal_objects(
    ctx: &BenchContext,
    before: &HashSet<String>,
) -> Result<Vec<ObjectMeta>, BenchError> {
    Ok(baseline::list(&*ctx.stack.wal, "")
        .await?
        .into_iter()
        .filter(|m| !before.contains(&m.path.to_string()))
        .collect())
}

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

pub(crate) fn figure(name: &str, value: f64, unit: &str) -> Figure {
    Figure { name: name.into(), value, unit: unit.into() }
}

/// RSS against the bound of issue #12: in-flight bytes + `extra` (a cache the scenario
/// configured) + 256 MiB.
pub(crate) fn rss_target(report: &mut ScenarioReport, peak: Option<u64>, extra: u64, what: &str) {
    let limit = report.in_flight_bytes as u64 + extra + (256 << 20);
    match peak {
        Some(p) => {
            report.figures.push(figure("peak RSS (process)", mib(p), "MiB"));
            report.targets.push(Target::at_most(
                &format!("peak RSS ≤ in-flight{what} + 256 MiB"),
                mib(p),
                mib(limit),
                "MiB",
            ));
        }
        None => report
            .notes
            .push("RSS is not available on this platform; the memory target is not checked.".into()),
    }
}

/// The environment variable holding the S3 server's process id when it runs as a process of
/// its own on this machine (`scripts/bench` sets it): its CPU time then counts in the storage
/// side's CPU per MiB acknowledged.
pub const S3_PID_ENV: &str = "LAKESTREAM_BENCH_S3_PID";

/// The fixed raw PUT baseline of issue #18: objects of 4 MiB, 8 at once, whatever the writer
/// does, so that small objects cannot lower the bar they are measured against.
const FIXED_PUT_BYTES: usize = 4 << 20;
const FIXED_PUT_CONCURRENCY: usize = 8;

/// The fixed offered load of the latency phase users compare with other systems: 5 MiB/s.
const FIXED_RATE_BYTES: u64 = 5 << 20;

/// What one produce phase did.
struct ProducePhase {
    appended: Appended,
    sampled: crate::meter::Sampled,
    /// WAL objects written during the phase, and their bytes.
    objects: u64,
    object_bytes: u64,
    /// Index puts committed during the phase.
    index_puts: u64,
    /// CPU seconds the S3 server process used during the phase (when its pid is known).
    s3_cpu_s: Option<f64>,
}

impl ProducePhase {
    fn puts_per_gib(&self) -> f64 {
        self.objects as f64 / (self.appended.stats.bytes as f64 / f64::from(1u32 << 30)).max(1e-9)
    }
}

/// The S3 server's pid from [`S3_PID_ENV`]; a value that is not a live process is an error
/// (a figure silently missing would look like a server that costs nothing).
fn s3_pid() -> Result<Option<u32>, BenchError> {
    s3_pid_of(std::env::var(S3_PID_ENV).ok())
}

fn s3_pid_of(raw: Option<String>) -> Result<Option<u32>, BenchError> {
    let Some(raw) = raw else { return Ok(None) };
    if raw.trim().is_empty() {
        return Ok(None);
    }
    let pid: u32 = raw
        .trim()
        .parse()
        .map_err(|_| BenchError::Config(format!("{S3_PID_ENV}={raw:?} is not a process id")))?;
    if crate::sys::cpu_seconds_of(pid).is_none() {
        return Err(BenchError::Config(format!(
            "{S3_PID_ENV}={pid}: no such process (or /proc is not readable)"
        )));
    }
    Ok(Some(pid))
}

/// Runs one produce phase over `logs`: closed loop (`rate` 0) or open loop at `rate`
/// entries/s, with the writer's and the S3 server's counters read before and after.
async fn produce_phase(
    ctx: &BenchContext,
    logs: &[LogRef],
    ends: Vec<u64>,
    label: &str,
    rate: u64,
    s3: Option<u32>,
) -> Result<ProducePhase, BenchError> {
    let writer = ctx.writer()?;
    let before = writer.stats();
    let s3_before = s3.and_then(crate::sys::cpu_seconds_of);
    let meter = Meter::new();
    let sampler = ctx.sampler(&meter, label, ctx.goal());
    let appended = append_load_at(ctx, logs, &meter, ends, ctx.load(), rate).await;
    let sampled = sampler.stop().await;
    let appended = appended?;
    let after = writer.stats();
    let s3_cpu_s = s3_before.zip(s3.and_then(crate::sys::cpu_seconds_of)).map(|(a, b)| b - a);
    Ok(ProducePhase {
        appended,
        sampled,
        objects: after.objects_written - before.objects_written,
        object_bytes: after.object_bytes.sum - before.object_bytes.sum,
        index_puts: after.index_puts - before.index_puts,
        s3_cpu_s,
    })
}

/// Produce, as issue #18 asks: saturation (closed loop), then open loop at 70 % of the
/// saturation rate and at a fixed 5 MiB/s, then the baselines on the same stores: raw PUTs of
/// `flush_bytes` objects at the writer's upload concurrency, raw PUTs of 4 MiB × 8, and raw
/// sequenced puts. With `--rate` set, only that open-loop phase runs in place of the three.
async fn produce(ctx: &BenchContext) -> Result<ScenarioReport, BenchError> {
    let s3 = s3_pid()?;
    let logs = ctx.create_stream(Scenario::Produce).await?;
    let ends = warm_up(ctx.writer()?, &logs).await?;
    let entry = ctx.knobs.entry_bytes as u64;
    let sat_label = if ctx.knobs.rate == 0 { "produce: saturation" } else { "produce: open loop" };
    let sat = produce_phase(ctx, &logs, ends, sat_label, ctx.knobs.rate, s3).await?;
    let s = &sat.appended.stats;
    // Open-loop phases: arrivals on a schedule, latency from the scheduled time.
    let mut open = Vec::new();
    if ctx.knobs.rate == 0 {
        let rate70 = ((s.ops_s() * 0.7) as u64).max(1);
        let phase70 =
            produce_phase(ctx, &logs, sat.appended.ends.clone(), "produce: open loop at 70 %", rate70, s3)
                .await?;
        let rate5 = (FIXED_RATE_BYTES / entry.max(1)).max(1);
        let phase5 = produce_phase(
            ctx,
            &logs,
            phase70.appended.ends.clone(),
            "produce: open loop at 5 MiB/s",
            rate5,
            s3,
        )
        .await?;
        open.push(("70 % of saturation", rate70, phase70));
        open.push(("5 MiB/s", rate5, phase5));
    }

    // Baselines, each as long as a measured phase.
    let uploads = ctx.config.service.writer.upload_concurrency();
    let flush_bytes = ctx.config.service.writer.flush_bytes;
    // A `--count` run is a quick check: a few baseline operations are enough (a count of
    // 4 MiB PUTs as large as the entry count would write gigabytes).
    let bl = match ctx.load() {
        Load::Ops(_) => Load::Ops(8),
        time => time,
    };
    let quiet = Meter::new();
    let put_sampler = ctx.sampler(&quiet, "produce: raw PUT of flush_bytes", goal_of(bl));
    let put =
        baseline::raw_puts(ctx.stack.wal.clone(), ctx.baseline_prefix(), flush_bytes, uploads, bl, &quiet)
            .await;
    put_sampler.stop().await;
    let put = put?;
    baseline::remove_prefix(&*ctx.stack.wal, &ctx.baseline_prefix()).await?;
    let fixed_sampler = ctx.sampler(&quiet, "produce: raw PUT 4 MiB × 8", goal_of(bl));
    let s3_before = s3.and_then(crate::sys::cpu_seconds_of);
    let fixed = baseline::raw_puts(
        ctx.stack.wal.clone(),
        ctx.baseline_prefix(),
        FIXED_PUT_BYTES,
        FIXED_PUT_CONCURRENCY,
        bl,
        &quiet,
    )
    .await;
    let fixed_s3_cpu = s3_before.zip(s3.and_then(crate::sys::cpu_seconds_of)).map(|(a, b)| b - a);
    fixed_sampler.stop().await;
    let fixed = fixed?;
    baseline::remove_prefix(&*ctx.stack.wal, &ctx.baseline_prefix()).await?;
    let seq_sampler = ctx.sampler(&quiet, "produce: sequenced put", goal_of(bl));
    let seq = baseline::raw_sequenced_puts(
        ctx.stack.meta.clone(),
        format!("{}-produce", ctx.run_id),
        logs.len().min(1024),
        128,
        entry,
        bl,
        &quiet,
    )
    .await;
    seq_sampler.stop().await;
    let seq = seq?;
    baseline::remove_sequences(&*ctx.stack.meta, &format!("{}-produce", ctx.run_id), logs.len().min(1024))
        .await?;

    let mib_acked = mib(s.bytes).max(1e-9);
    let mean_object = sat.object_bytes / sat.objects.max(1);
    let index_puts_s = per_second(sat.index_puts as f64, s.elapsed);
    let mut r = ctx.report(Scenario::Produce);
    r.figures = vec![
        figure("acknowledged (saturation)", mib(s.bytes) / s.elapsed.as_secs_f64().max(1e-9), "MiB/s"),
        figure("acknowledged entries", s.ops_s(), "entries/s"),
        figure("entries", s.ops as f64, ""),
        figure("WAL objects written", sat.objects as f64, ""),
        figure("mean WAL object", mean_object as f64 / 1024.0, "KiB"),
        figure("PUTs per GiB acknowledged", sat.puts_per_gib(), ""),
        figure("writer's index puts", index_puts_s, "puts/s"),
        figure("index puts per WAL object", sat.index_puts as f64 / (sat.objects as f64).max(1.0), ""),
        figure(&format!("raw PUT {} KiB × {uploads}", flush_bytes >> 10), mb_per_s(&put), "MiB/s"),
        figure("raw PUT 4 MiB × 8", mb_per_s(&fixed), "MiB/s"),
        figure("raw sequenced puts", seq.ops_s(), "puts/s"),
    ];
    let ours_ms = sat.appended.cpu_s.map(|c| c * 1000.0 / mib_acked);
    let s3_ms = sat.s3_cpu_s.map(|c| c * 1000.0 / mib_acked);
    if let Some(cpu) = sat.appended.cpu_s {
        r.figures.push(figure(
            "CPU busy during saturation (this process)",
            cpu / s.elapsed.as_secs_f64().max(1e-9),
            "cores",
        ));
    }
    if let Some(ms) = ours_ms {
        r.figures.push(figure("CPU per MiB acknowledged (this process: writer + load generator)", ms, "ms"));
    }
    if let Some(ms) = s3_ms {
        r.figures.push(figure("CPU per MiB acknowledged (S3 server process)", ms, "ms"));
    }
    if let Some(c) = fixed_s3_cpu {
        r.figures.push(figure(
            "S3 server CPU per MiB of raw 4 MiB PUTs",
            c * 1000.0 / mib(fixed.bytes).max(1e-9),
            "ms",
        ));
    }
    for (name, rate, phase) in &open {
        let st = &phase.appended.stats;
        r.figures.push(figure(&format!("offered, open loop at {name}"), mib(rate * entry), "MiB/s"));
        r.figures.push(figure(
            &format!("acknowledged, open loop at {name}"),
            mib(st.bytes) / st.elapsed.as_secs_f64().max(1e-9),
            "MiB/s",
        ));
        r.figures.push(figure(&format!("PUTs per GiB, open loop at {name}"), phase.puts_per_gib(), ""));
    }
    r.latencies = vec![Latency::of(
        if ctx.knobs.rate == 0 { "ack, saturation (closed loop)" } else { "ack, open loop" },
        &s.latency,
    )];
    for (name, _, phase) in &open {
        r.latencies.push(Latency::of(&format!("ack, open loop at {name}"), &phase.appended.stats.latency));
    }
    r.latencies.push(Latency::of(&format!("raw PUT {} KiB × {uploads}", flush_bytes >> 10), &put.latency));
    r.latencies.push(Latency::of("raw PUT 4 MiB × 8", &fixed.latency));
    r.latencies.push(Latency::of("raw sequenced put", &seq.latency));
    r.ratios = vec![
        Ratio::new("acknowledged vs raw PUT 4 MiB × 8", mb_per_s(s), mb_per_s(&fixed), "MiB/s"),
        Ratio::new(
            &format!(
                "acknowledged vs raw PUT {} KiB × {uploads} (the writer's object size and concurrency)",
                flush_bytes >> 10
            ),
            mb_per_s(s),
            mb_per_s(&put),
            "MiB/s",
        ),
        Ratio::new("writer's index puts vs raw sequenced puts", index_puts_s, seq.ops_s(), "puts/s"),
    ];
    r.samples = sat.sampled.samples.clone();

    // The goals of issue #18.
    r.targets.push(Target::at_least(
        "acknowledged MiB/s ÷ raw PUT 4 MiB × 8 MiB/s ≥ 0.8",
        crate::report::ratio(mb_per_s(s), mb_per_s(&fixed)).unwrap_or(0.0),
        0.8,
        "×",
    ));
    r.targets.push(Target::at_most(
        "PUTs per GiB acknowledged at saturation ≤ 300",
        sat.puts_per_gib(),
        300.0,
        "",
    ));
    let bound = r.flush_window_ms as f64 + put.latency.summary().p99_ms + seq.latency.summary().p99_ms + 10.0;
    if let Some((_, _, phase)) = open.first() {
        r.targets.push(Target::at_most(
            "ack p99, open loop at 70 % of saturation ≤ window + raw PUT p99 + sequenced put p99 + 10 ms",
            phase.appended.stats.latency.summary().p99_ms,
            bound,
            "ms",
        ));
    }
    if let Some((_, _, phase)) = open.get(1) {
        let p99 = phase.appended.stats.latency.summary().p99_ms;
        if r.flush_window_ms <= 5 {
            r.targets.push(Target::at_most(
                "low-latency profile (window ≤ 5 ms), 5 MiB/s offered: ack p99 ≤ 11.7 ms",
                p99,
                11.7,
                "ms",
            ));
        } else {
            r.notes.push(format!(
                "Ack p99 at 5 MiB/s offered is {p99:.1} ms with a {} ms window; the 11.7 ms goal is for the \
                 low-latency profile (window ≤ 5 ms) and is checked in that profile's run.",
                r.flush_window_ms
            ));
        }
    }
    match (ours_ms, s3_ms) {
        (Some(ours), Some(s3)) => r.targets.push(Target::at_most(
            "storage-side CPU per MiB acknowledged (ours + S3 server) ≤ 4.5 ms",
            ours + s3,
            4.5,
            "ms",
        )),
        (Some(ours), None) => r.targets.push(Target::at_most(
            "storage-side CPU per MiB acknowledged (ours; no separate S3 server process) ≤ 4.5 ms",
            ours,
            4.5,
            "ms",
        )),
        _ => r.notes.push("CPU time is not available on this platform; the CPU goal is not checked.".into()),
    }
    let peak = [Some(&sat)]
        .into_iter()
        .chain(open.iter().map(|(_, _, p)| Some(p)))
        .flatten()
        .filter_map(|p| p.sampled.peak_rss)
        .max();
    rss_target(&mut r, peak, 0, "");
    r.notes.push(format!(
        "Phases: saturation (closed loop, {} producers), then open loop at 70 % of the saturation rate and at \
         5 MiB/s (arrivals on a schedule, each acknowledgement timed from its scheduled start, so a stall is \
         not hidden), each {:.0} s. Baselines on the same stores, each as long: raw PUTs of flush_bytes \
         ({} KiB) at the writer's upload concurrency ({uploads}), raw PUTs of 4 MiB × 8 (fixed, whatever the \
         writer does), raw sequenced puts on {} sequences, 128-byte values like an index record.",
        ctx.producers(),
        ctx.knobs.duration_s,
        flush_bytes >> 10,
        logs.len().min(1024),
    ));
    r.notes.push(format!(
        "CPU per MiB of this process counts the writer and the bench's load generator (same process); the S3 \
         server's is {}.",
        if s3.is_some() {
            format!("read from /proc of pid {} ({S3_PID_ENV})", s3.unwrap_or(0))
        } else {
            format!("not counted ({S3_PID_ENV} not set: local disk or a remote server)")
        }
    ));
    Ok(r)
}

/// MiB/s (2²⁰ bytes) of a phase.
fn mb_per_s(stats: &OpStats) -> f64 {
    mib(stats.bytes) / stats.elapsed.as_secs_f64().max(1e-9)
}

fn goal_of(load: Load) -> Goal {
    match load {
        Load::Ops(n) => Goal::Ops(n),
        Load::Time(d) => Goal::Time(d),
    }
}

/// Writes the data set of `consume` and `compact` (not measured; a progress bar shows it).
async fn write_data_set(
    ctx: &BenchContext,
    scenario: Scenario,
) -> Result<(Vec<LogRef>, Appended, Vec<ObjectMeta>), BenchError> {
    let logs = ctx.create_stream(scenario).await?;
    let ends = warm_up(ctx.writer()?, &logs).await?;
    let before = wal_paths(ctx).await?;
    let meter = Meter::new();
    let load = ctx.data_load();
    let sampler = ctx.sampler(&meter, &format!("{}: write data", scenario.name()), goal_of(load));
    let appended = append_load(ctx, &logs, &meter, ends, load).await;
    sampler.stop().await;
    let appended = appended?;
    let written = new_wal_objects(ctx, &before).await?;
    Ok((logs, appended, written))
}

async fn compact(
    ctx: &BenchContext,
    logs: &[LogRef],
    written: Vec<ObjectMeta>,
) -> Result<ScenarioReport, BenchError> {
    let wal_bytes: u64 = written.iter().map(|m| m.size).sum();

    // Ranges close at once, so that everything just written is compacted in this run.
    let config = CompactorConfig { max_range_age: Duration::ZERO, ..ctx.config.service.compactor.clone() };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    // The compactor's WAL reads are counted: each object once for all the logs of a pass.
    let wal_counter = Arc::new(CountingStore::new(ctx.stack.wal.clone()));
    let compactor = Compactor::new(
        config.clone(),
        CompactorDeps {
            meta: ctx.stack.meta.clone(),
            wal: wal_counter.clone(),
            compacted: ctx.stack.compacted.clone(),
            clock,
            tokens: Arc::new(RandomTokens),
        },
    )
    .map_err(err("compactor"))?;
    let meter = Meter::new();
    let range_latency = Mutex::new(Histogram::new());
    let range_started: Mutex<HashMap<(u64, u64), Instant>> = Mutex::new(HashMap::new());
    let progress = |p: &Progress| match p {
        Progress::RangeStarted { log_id, start, .. } => {
            range_started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((log_id.0, *start), Instant::now());
        }
        Progress::RangeCompacted(range) => {
            if let Some(t) =
                range_started.lock().unwrap_or_else(|e| e.into_inner()).remove(&(range.log_id.0, range.start))
            {
                range_latency.lock().unwrap_or_else(|e| e.into_inner()).record(t.elapsed());
            }
        }
        _ => {}
    };
    // What the process holds before the compactor starts: the stack and the runtime (run by
    // `lakestream bench`, a process with no writer; in one process with `prepare`, the
    // writer's data set behind it too).
    let rss_before = crate::sys::rss_bytes();
    // The time series follows the WAL bytes the compactor has read (its reads are paced by
    // its encoding and writes): ranges complete only at the end of a long C2.
    let sampler = ctx.sampler(&meter, "compact", Goal::Bytes(wal_bytes));
    let feed = {
        let (meter, counter) = (meter.clone(), wal_counter.clone());
        tokio::spawn(async move {
            let mut last = 0;
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let read = counter.counts().bytes_fetched;
                meter.add(read.saturating_sub(last));
                last = read;
            }
        })
    };
    let cpu_before = crate::sys::cpu_seconds();
    let started = Instant::now();
    let (mut ranges, mut files, mut payload, mut written_bytes) = (0usize, 0usize, 0u64, 0u64);
    let mut failure = None;
    // One pass compacts what is closed; repeat until a pass finds nothing left.
    for _ in 0..100 {
        let pass = compactor.compact_once(logs, &progress).await;
        if let Some((log, e)) = pass.failed.first() {
            failure =
                Some(BenchError::Operation { what: format!("compaction of log {log}"), message: e.clone() });
            break;
        }
        if pass.ranges.is_empty() {
            break;
        }
        ranges += pass.ranges.len();
        files += pass.ranges.iter().map(|r| r.files).sum::<usize>();
        payload += pass.payload_bytes;
        written_bytes += pass.bytes_written;
    }
    let elapsed = started.elapsed();
    let cpu_s = cpu_before.zip(crate::sys::cpu_seconds()).map(|(a, b)| b - a);
    feed.abort();
    let sampled = sampler.stop().await;
    if let Some(e) = failure {
        return Err(e);
    }
    if ranges == 0 {
        return Err(BenchError::Operation {
            what: "compaction".into(),
            message: "no range was compacted".into(),
        });
    }
    let Counts { gets: wal_gets, bytes_fetched: wal_fetched, .. } = wal_counter.counts();
    drop(compactor);

    // The baseline: the same WAL objects read once each and written back as files of the
    // compactor's sizes, as many at once as the compactor wrote, with no encoding.
    let stream_dir = logs.first().map(|l| format!("{}/{}/", l.namespace, l.stream)).unwrap_or_default();
    let file_sizes: Vec<u64> = baseline::list(&*ctx.stack.compacted, &stream_dir)
        .await?
        .into_iter()
        .filter(|m| m.path.as_str().ends_with(".parquet"))
        .map(|m| m.size)
        .collect();
    let streams = config.concurrent_logs.min(logs.len()).max(1);
    let quiet = Meter::new();
    let copy_sampler = ctx.sampler(&quiet, "compact: raw read + write", ctx.goal());
    let objects = written.iter().map(|m| (m.path.clone(), m.size)).collect();
    let min_duration = match ctx.load() {
        Load::Time(d) => d,
        Load::Ops(_) => Duration::ZERO,
    };
    let copy = baseline::raw_compaction_copies(
        ctx.stack.wal.clone(),
        ctx.stack.compacted.clone(),
        objects,
        file_sizes.clone(),
        streams,
        config.fetch_bytes as u64,
        ctx.baseline_prefix(),
        min_duration,
        &quiet,
    )
    .await;
    copy_sampler.stop().await;
    let copy = copy?;
    baseline::remove_prefix(&*ctx.stack.compacted, &ctx.baseline_prefix()).await?;
    // The data set is this run's own: removed (its WAL objects and compacted files), so that
    // large runs one after another fit on the disk. Its stream is never read again.
    let paths: Vec<lakestream_objstore::ObjectPath> = written.iter().map(|m| m.path.clone()).collect();
    ctx.stack.wal.delete_many(&paths).await.map_err(err("removing the data set's WAL objects"))?;
    baseline::remove_prefix(&*ctx.stack.compacted, &stream_dir).await?;

    let compact_mb_s = per_second(wal_bytes as f64 / 1e6, elapsed);
    let range_latency = range_latency.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut r = ctx.report(Scenario::Compact);
    r.figures = vec![
        figure("WAL bytes", mib(wal_bytes), "MiB"),
        figure("WAL objects", written.len() as f64, ""),
        figure("payload compacted", mib(payload), "MiB"),
        figure("ranges", ranges as f64, ""),
        figure("Parquet files", files as f64, ""),
        figure("bytes written", mib(written_bytes), "MiB"),
        figure("compaction time", elapsed.as_secs_f64(), "s"),
        figure("compaction (WAL bytes covered)", compact_mb_s, "MB/s"),
        figure("compaction (payload)", per_second(payload as f64 / 1e6, elapsed), "MB/s"),
        figure("compaction: WAL GETs (whole and ranged)", wal_gets as f64, ""),
        figure("compaction: fetched from storage", mib(wal_fetched), "MiB"),
        figure("raw read + write", copy.mb_s(), "MB/s"),
        figure("raw read + write time", copy.elapsed.as_secs_f64(), "s"),
        figure("raw read + write: files", copy.ops as f64, ""),
        figure("compactor: logs at once (concurrent_logs)", streams as f64, ""),
        figure("compactor: fetch_bytes (its cache)", mib(config.fetch_bytes as u64), "MiB"),
        figure("compactor: row group", mib(config.row_group_bytes as u64), "MiB"),
    ];
    if let Some(cpu) = cpu_s.filter(|c| *c > 0.0) {
        r.figures.push(figure(
            "compaction per CPU second (WAL bytes)",
            wal_bytes as f64 / 1e6 / cpu,
            "MB/s per core",
        ));
    }
    r.latencies = vec![
        Latency::of("range compaction (C2–C5)", &range_latency),
        Latency::of("raw write of one file (its reads included)", &copy.latency),
    ];
    r.ratios = vec![
        Ratio::new("compaction vs raw read + write (same WAL bytes)", compact_mb_s, copy.mb_s(), "MB/s"),
        Ratio::new("compaction: bytes fetched vs WAL bytes", mib(wal_fetched), mib(wal_bytes), "MiB"),
    ];
    r.samples = sampled.samples;
    r.targets.push(Target::at_least(
        "compaction ≥ 0.7 × raw read + write MB/s",
        crate::report::ratio(compact_mb_s, copy.mb_s()).unwrap_or(0.0),
        0.7,
        "×",
    ));
    if let Some(before) = rss_before {
        r.figures.push(figure("RSS when the compaction started", mib(before), "MiB"));
    }
    // Issue #19's bound: the compactor's cache (its fetch window) + 2 row groups + 256 MiB;
    // a writer in the same process (`run` in one process) adds its in-flight bytes.
    let bound = config.fetch_bytes as u64 + 2 * config.row_group_bytes as u64;
    match (sampled.peak_rss, ctx.stack.writer.is_some()) {
        (peak, true) => rss_target(&mut r, peak, bound, " + compactor cache (fetch_bytes) + 2 × row group"),
        (Some(peak), false) => {
            r.figures.push(figure("peak RSS (process)", mib(peak), "MiB"));
            r.targets.push(Target::at_most(
                "compactor peak RSS ≤ its cache (fetch_bytes) + 2 × row group + 256 MiB",
                mib(peak),
                mib(bound + (256 << 20)),
                "MiB",
            ));
        }
        (None, false) => {
            r.notes.push("RSS is not available on this platform; the memory target is not checked.".into())
        }
    }
    r.notes.push(format!(
        "Codec {:?}; payloads are incompressible. The raw read + write reads every WAL object of the data \
         set whole, once, up to fetch_bytes ahead, and writes its bytes back in {streams} streams at once \
         (the compactor's logs at once) as files of the sizes the compactor wrote ({} files), through \
         the same streaming uploads; repeated for at least the phase duration.",
        config.codec,
        file_sizes.len()
    ));
    r.notes.push(match std::env::var("MALLOC_ARENA_MAX") {
        Ok(arenas) => format!(
            "glibc malloc arenas: MALLOC_ARENA_MAX={arenas} (the compactor role's setting in docker-compose.yml \
             and the Helm chart)."
        ),
        Err(_) => "glibc malloc arenas: the default (MALLOC_ARENA_MAX unset).".into(),
    });
    Ok(r)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) async fn context(dir: &std::path::Path, knobs: Knobs) -> BenchContext {
        let mut config = BenchConfig::dev(dir);
        config.service.metadata = MetadataConfig::Memory;
        BenchContext::open(config, knobs, "t1", false).await.unwrap()
    }

    pub(crate) fn tiny() -> Knobs {
        Knobs {
            logs: 2,
            entry_bytes: 1024,
            flush_window_ms: Some(2),
            in_flight_bytes: Some(256 << 10),
            count: 200,
            duration_s: 0.0,
            data_mib: 0,
            ..Knobs::default()
        }
    }

    pub(crate) fn figure_of(r: &ScenarioReport, name: &str) -> f64 {
        r.figures
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no figure {name}: {:?}", r.figures))
            .value
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn produce_smoke() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path(), tiny()).await;
        let r = run(&ctx, Scenario::Produce).await.unwrap();
        assert_eq!(figure_of(&r, "entries"), 200.0);
        assert!(figure_of(&r, "WAL objects written") >= 1.0);
        // At least one index put per WAL object (one per log section).
        assert!(figure_of(&r, "index puts per WAL object") >= 1.0);
        assert!(figure_of(&r, "raw PUT 4 MiB × 8") > 0.0);
        // Saturation, then the two open-loop phases, each the same count; then the baselines.
        let names: Vec<&str> = r.latencies.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names[..3],
            [
                "ack, saturation (closed loop)",
                "ack, open loop at 70 % of saturation",
                "ack, open loop at 5 MiB/s"
            ]
        );
        assert!(r.latencies[..3].iter().all(|l| l.summary.count == 200), "{:?}", r.latencies);
        assert!(r.latencies[3..].iter().all(|l| l.summary.count >= 8), "{:?}", r.latencies);
        assert_eq!(r.ratios.len(), 3);
        assert!(r.ratios.iter().all(|r| r.ratio.is_some()), "{:?}", r.ratios);
        let goals: Vec<&str> = r.targets.iter().map(|t| t.name.as_str()).collect();
        for goal in ["raw PUT 4 MiB × 8", "PUTs per GiB", "open loop at 70 %", "CPU per MiB", "peak RSS"] {
            assert!(goals.iter().any(|g| g.contains(goal)), "no goal on {goal}: {goals:?}");
        }
        // The baselines cleaned up after themselves.
        assert!(baseline::list(&*ctx.stack.wal, "bench-baseline/").await.unwrap().is_empty());
        ctx.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn produce_open_loop_smoke() {
        // With --rate, one open-loop phase at that rate replaces the three.
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path(), Knobs { rate: 2000, count: 100, ..tiny() }).await;
        let r = run(&ctx, Scenario::Produce).await.unwrap();
        assert_eq!(figure_of(&r, "entries"), 100.0);
        assert_eq!(r.latencies[0].name, "ack, open loop");
        assert_eq!(r.latencies[0].summary.count, 100);
        assert!(!r.latencies.iter().any(|l| l.name.contains("70 %")), "{:?}", r.latencies);
        ctx.close().await;
    }

    #[test]
    fn a_bad_s3_pid_is_refused_by_name() {
        let err = |value: &str| s3_pid_of(Some(value.into())).unwrap_err().to_string();
        assert!(err("x").contains("not a process id"), "{}", err("x"));
        assert!(err("4294967295").contains("no such process"));
        assert_eq!(s3_pid_of(None).unwrap(), None);
        assert_eq!(s3_pid_of(Some(" ".into())).unwrap(), None);
        assert_eq!(s3_pid_of(Some(std::process::id().to_string())).unwrap(), Some(std::process::id()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn consume_smoke() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path(), tiny()).await;
        let r = run(&ctx, Scenario::Consume).await.unwrap();
        // 200 entries of 1 KiB plus one 7-byte warm-up entry per log, read back whole.
        assert_eq!(figure_of(&r, "data set (payload)"), mib(200 * 1024 + 2 * 7));
        for figure in [
            "cold consume, HTTP (payload delivered)",
            "cold consume, gRPC (payload delivered)",
            "cold consume, gRPC session (payload delivered)",
            "cached consume, HTTP (wall)",
            "cached consume, gRPC session (wall)",
            "catch-up, HTTP (WAL bytes covered)",
            "compacted cold consume, HTTP (payload delivered)",
        ] {
            assert!(figure_of(&r, figure) > 0.0, "{figure}");
        }
        // Every pass delivers the whole data set, whichever the transport.
        for t in ["HTTP", "gRPC", "gRPC session"] {
            let delivered = figure_of(&r, &format!("cold {t}: delivered to clients"));
            let passes = figure_of(&r, &format!("cold {t}: passes"));
            assert!(
                (delivered - passes * mib(200 * 1024 + 2 * 7)).abs() < 1e-6,
                "{t}: {delivered} MiB in {passes} passes"
            );
        }
        assert_eq!(
            figure_of(&r, "compacted: delivered"),
            figure_of(&r, "compacted: passes") * mib(200 * 1024 + 2 * 7)
        );
        assert!(r.latencies.iter().all(|l| l.summary.count > 0), "{:?}", r.latencies);
        let goals: Vec<&str> = r.targets.iter().map(|t| t.name.as_str()).collect();
        for goal in [
            "cold consume (HTTP, RAW)",
            "cold consume (gRPC session, RAW)",
            "cold consume (HTTP, compacted)",
            "fetched ÷ delivered",
            "catch-up",
            "per core",
            "peak RSS",
        ] {
            assert!(goals.iter().any(|g| g.contains(goal)), "no goal on {goal}: {goals:?}");
        }
        ctx.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn compact_smoke() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path(), tiny()).await;
        let r = run(&ctx, Scenario::Compact).await.unwrap();
        assert!(figure_of(&r, "ranges") >= 2.0, "{:?}", r.figures);
        // Every entry, warm-ups included, ends up compacted.
        assert_eq!(figure_of(&r, "payload compacted"), mib(200 * 1024 + 2 * 7));
        assert!(r.ratios[0].ratio.is_some());
        // One pass over both logs: every WAL object fetched once, whole (the warm-ups' one
        // or two small objects, which the data set does not count, besides).
        let gets = figure_of(&r, "compaction: WAL GETs (whole and ranged)");
        let objects = figure_of(&r, "WAL objects");
        assert!(objects <= gets && gets <= objects + 2.0, "{:?}", r.figures);
        let fetched = figure_of(&r, "compaction: fetched from storage");
        assert!(fetched <= figure_of(&r, "WAL bytes") + 0.01, "{:?}", r.figures);
        assert!(figure_of(&r, "raw read + write: files") >= 2.0, "{:?}", r.figures);
        assert!(baseline::list(&*ctx.stack.compacted, "bench-baseline/").await.unwrap().is_empty());
        ctx.close().await;
    }

    /// As `lakestream bench` runs them: one stack writes the data sets and closes, a fresh
    /// one with no writer (another process, there) measures over the recorded data sets.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stack_without_a_writer_measures_what_another_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let config = BenchConfig::dev(dir.path());
        for scenario in [Scenario::Compact, Scenario::Consume] {
            let ctx = BenchContext::open(config.clone(), tiny(), "t2", false).await.unwrap();
            let data = prepare(&ctx, scenario).await.unwrap();
            ctx.close().await;
            drop(ctx);
            let json = serde_json::to_string(&data).unwrap();
            let data: Vec<DataSet> = serde_json::from_str(&json).unwrap();
            let ctx = BenchContext::open_for(config.clone(), tiny(), "t2", false, false).await.unwrap();
            assert!(ctx.writer().is_err(), "the measuring stack has no writer");
            let r = measure(&ctx, scenario, data).await.unwrap();
            ctx.close().await;
            let payload = mib(200 * 1024 + 2 * 7);
            match scenario {
                Scenario::Compact => assert_eq!(figure_of(&r, "payload compacted"), payload),
                _ => assert_eq!(figure_of(&r, "data set (payload)"), payload),
            }
            if scenario == Scenario::Compact {
                let goal = r.targets.iter().find(|t| t.name.contains("peak RSS")).unwrap();
                assert!(goal.name.starts_with("compactor peak RSS ≤ its cache"), "{goal:?}");
            }
            // The report survives the trip between processes (figures to their last bit or so).
            let back: ScenarioReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
            assert_eq!(back.figures.len(), r.figures.len());
            for (a, b) in back.figures.iter().zip(&r.figures) {
                assert!(a.name == b.name && (a.value - b.value).abs() <= 1e-9 * b.value.abs(), "{a:?} {b:?}");
            }
            assert_eq!(
                back.targets.iter().map(|t| &t.name).collect::<Vec<_>>(),
                r.targets.iter().map(|t| &t.name).collect::<Vec<_>>()
            );
        }
    }

    #[tokio::test]
    async fn bad_knobs_and_run_ids_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = BenchConfig::dev(dir.path());
        let e =
            BenchContext::open(config.clone(), Knobs { logs: 0, ..tiny() }, "t", false).await.unwrap_err();
        assert!(matches!(e, BenchError::Knob { knob: "logs", .. }), "{e}");
        let e = BenchContext::open(config, tiny(), "a/b", false).await.unwrap_err();
        assert!(matches!(e, BenchError::Knob { knob: "run-id", .. }), "{e}");
    }

    #[test]
    fn payloads_are_distinct_and_sized() {
        let pool = payload_pool(1000);
        assert_eq!(pool.len(), 64);
        assert!(pool.iter().all(|p| p.len() == 1000));
        assert_ne!(pool[0], pool[1]);
        assert_eq!(payload_pool(32 << 20).len(), 1);
        assert_eq!(pseudo_random(13, 5), pseudo_random(13, 5));
    }
}
