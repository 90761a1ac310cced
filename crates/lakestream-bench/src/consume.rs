//! The `consume` scenario: reads as a client sees them (issue #19).
//!
//! The stack's read path is served over HTTP (`Accept: application/vnd.lakestream.entries`,
//! raw frames) and gRPC (unary `Fetch`, and the streaming `ReadSession`) on loopback, in this
//! process, and clients in this process fetch every log of a data set from its first offset
//! to its end, one client per log, 8 MiB per fetch (a session streams answers of up to the
//! API's default, 1 MiB), counting the payload bytes that reach them. Every phase runs whole passes over
//! the data set until it has run for `--duration` (one pass with `--count`):
//!
//! | phase | reader | baseline |
//! | --- | --- | --- |
//! | cold, HTTP, gRPC and gRPC session | a fresh reader per pass (empty caches), its GETs and their bytes counted | raw GET of every WAL object of the data set, one task per log, passes as long |
//! | cached, HTTP, gRPC and gRPC session | one reader whose cache holds the data set, warmed by one pass | CPU time of this process (server and clients) per byte delivered |
//! | compacted, HTTP | the data set compacted (PARQUET records); a fresh reader per pass | raw GET of every compacted file and companion, one task per log |
//! | catch-up, HTTP | one log of `--catch-up-mib` read by one client from its first offset; a fresh reader per pass | raw GET of its WAL objects one after another |
//!
//! The data set's WAL objects hold every log (the writer's default), so the cold phases are
//! the "8 readers of logs sharing objects" of the goal on bytes fetched ÷ bytes delivered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes};
use http_body_util::BodyExt as _;
use lakestream_compactor::{Compactor, CompactorConfig, CompactorDeps, Progress};
use lakestream_format::{Clock, LogRef, SystemClock};
use lakestream_meta::lease::RandomTokens;
use lakestream_objstore::{CountingStore, ObjectMeta, ObjectPath, ObjectStore};
use lakestream_reader::{Reader, ReaderConfig, ReaderDeps};
use lakestream_server::grpc::pb;
use lakestream_server::grpc::pb::lakestream_client::LakestreamClient;
use lakestream_service::stack::DEFAULT_NAMESPACE;

use crate::baseline::{self, Load, OpStats, per_second};
use crate::hist::Histogram;
use crate::meter::{Goal, Meter, Sampled};
use crate::report::{Latency, Ratio, ScenarioReport, Target};
use crate::scenarios::{BenchContext, DataSet, Scenario, figure, mib};
use crate::{BenchError, err};

/// Payload bytes a client asks for per fetch.
const FETCH_BYTES: u64 = 8 << 20;

/// Payload bytes per message of a gRPC read session: the API's default, what a client that
/// names no size gets.
const SESSION_MESSAGE_BYTES: u64 = lakestream_service::api::DEFAULT_FETCH_BYTES as u64;

/// How a client fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// `GET .../entries` with the raw entries body, one request per fetch.
    Http,
    /// The unary `Fetch` call, one call per fetch.
    Grpc,
    /// One `ReadSession` call per partition: answers streamed while the client reads.
    GrpcSession,
}

impl Transport {
    /// Every transport, in the order the phases run.
    const ALL: [Transport; 3] = [Transport::Http, Transport::Grpc, Transport::GrpcSession];

    fn name(self) -> &'static str {
        match self {
            Transport::Http => "HTTP",
            Transport::Grpc => "gRPC",
            Transport::GrpcSession => "gRPC session",
        }
    }

    /// What one latency sample of this transport covers.
    fn unit(self) -> String {
        match self {
            Transport::Http | Transport::Grpc => format!("fetch, {} MiB max", FETCH_BYTES >> 20),
            Transport::GrpcSession => format!("message, {} MiB max", SESSION_MESSAGE_BYTES >> 20),
        }
    }
}

/// A gRPC client of `at` set up for answers of megabytes (docs/api.md, "gRPC clients"): HTTP/2
/// windows of 16 MiB (with the defaults a fetch waits for a window update every few hundred
/// KiB) and frames of up to 1 MiB (with the default 16 KiB the client's CPU per byte doubles).
async fn grpc_client(at: SocketAddr) -> Result<LakestreamClient<tonic::transport::Channel>, BenchError> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{at}"))
        .map_err(err("gRPC endpoint"))?
        .initial_stream_window_size(Some(16 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .max_frame_size(Some(1 << 20))
        .connect()
        .await
        .map_err(err(format!("connecting to gRPC at {at}")))?;
    Ok(LakestreamClient::new(channel).max_decoding_message_size(usize::MAX))
}

/// The stack's API over one reader, served on loopback until dropped.
struct Served {
    http: SocketAddr,
    grpc: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Served {
    /// Serves the context's stack with `reader` in place of its own, on fresh ports.
    async fn start(ctx: &BenchContext, reader: Reader) -> Result<Served, BenchError> {
        let mut stack = ctx.stack.clone();
        stack.reader = Some(reader);
        let metrics = Arc::new(lakestream_service::metrics::Metrics::default());
        let api =
            lakestream_service::api::Api::new(stack, metrics.clone(), ctx.config.server.http.max_fetch_wait);
        let app = lakestream_server::http::router(lakestream_server::http::AppState::with_api(
            api.clone(),
            ctx.config.server.http.clone(),
        ));
        let bind = || tokio::net::TcpListener::bind(("127.0.0.1", 0));
        let (http, grpc) =
            (bind().await.map_err(err("HTTP listener"))?, bind().await.map_err(err("gRPC listener"))?);
        let (http_at, grpc_at) = (
            http.local_addr().map_err(err("HTTP listener"))?,
            grpc.local_addr().map_err(err("gRPC listener"))?,
        );
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let limits = ctx.config.server.listener.clone();
        let http_task = {
            let (limits, stats, stopped) =
                (limits.clone(), metrics.http_connections.clone(), stopped.clone());
            tokio::spawn(async move {
                lakestream_server::listener::serve_connections(
                    http,
                    None,
                    app,
                    &limits,
                    stats,
                    wait(stopped),
                )
                .await;
            })
        };
        let grpc_task = {
            let grpc_config = ctx.config.server.grpc.clone();
            tokio::spawn(async move {
                lakestream_server::grpc::serve(grpc, api, &grpc_config, &limits, None, wait(stopped)).await;
            })
        };
        Ok(Served { http: http_at, grpc: grpc_at, stop, tasks: vec![http_task, grpc_task] })
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

type HttpClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<Bytes>,
>;

fn http_client() -> HttpClient {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// Counts the payload bytes of a raw-frames body as it streams in (frames may span chunks):
/// each frame is offset (8), record count (4), timestamp (8), payload length (4), payload.
#[derive(Debug, Default)]
struct FrameCounter {
    header: Vec<u8>,
    payload_left: u64,
    payload: u64,
    entries: u64,
}

impl FrameCounter {
    fn feed(&mut self, mut chunk: Bytes) {
        while chunk.has_remaining() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(chunk.len() as u64);
                chunk.advance(n as usize);
                self.payload_left -= n;
                self.payload += n;
                continue;
            }
            let want = 24 - self.header.len();
            let n = want.min(chunk.len());
            self.header.extend_from_slice(&chunk[..n]);
            chunk.advance(n);
            if self.header.len() == 24 {
                let len =
                    u32::from_be_bytes([self.header[20], self.header[21], self.header[22], self.header[23]]);
                self.payload_left = u64::from(len);
                self.entries += 1;
                self.header.clear();
            }
        }
    }
}

/// One client reading partition `p` from `from` to `end`; returns (payload bytes, fetches,
/// latency per fetch).
async fn read_partition(
    transport: Transport,
    served: (SocketAddr, SocketAddr),
    stream: &str,
    p: u32,
    from: u64,
    end: u64,
    meter: &Arc<Meter>,
) -> Result<(u64, u64, Histogram), BenchError> {
    let mut latency = Histogram::new();
    let (mut next, mut bytes, mut fetches) = (from, 0u64, 0u64);
    let what = |next: u64| format!("{} fetch of partition {p} at {next}", transport.name());
    match transport {
        Transport::Http => {
            let client = http_client();
            while next < end {
                let uri = format!(
                    "http://{}/v1/namespaces/{DEFAULT_NAMESPACE}/streams/{stream}/partitions/{p}/entries?offset={next}&max_bytes={FETCH_BYTES}",
                    served.0
                );
                let request = http::Request::get(uri)
                    .header(http::header::ACCEPT, lakestream_server::http::RAW_ENTRIES)
                    .body(http_body_util::Empty::new())
                    .map_err(err(what(next)))?;
                let t = Instant::now();
                let response = client.request(request).await.map_err(err(what(next)))?;
                if !response.status().is_success() {
                    let status = response.status();
                    let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    return Err(BenchError::Operation {
                        what: what(next),
                        message: format!("{status}: {}", String::from_utf8_lossy(&body)),
                    });
                }
                let after = response
                    .headers()
                    .get("lakestream-next-offset")
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                    .ok_or_else(|| BenchError::Operation {
                        what: what(next),
                        message: "no lakestream-next-offset header".into(),
                    })?;
                let mut body = response.into_body();
                let mut frames = FrameCounter::default();
                while let Some(frame) = body.frame().await {
                    if let Ok(data) = frame.map_err(err(what(next)))?.into_data() {
                        frames.feed(data);
                    }
                }
                latency.record(t.elapsed());
                meter.add(frames.payload);
                (bytes, fetches) = (bytes + frames.payload, fetches + 1);
                if frames.entries == 0 || after <= next {
                    return Err(BenchError::Operation {
                        what: what(next),
                        message: format!("no progress before the end offset {end}"),
                    });
                }
                next = after;
            }
        }
        Transport::Grpc => {
            let mut client = grpc_client(served.1).await?;
            while next < end {
                let request = pb::FetchRequest {
                    namespace: DEFAULT_NAMESPACE.into(),
                    stream: stream.into(),
                    partition: p,
                    offset: next,
                    max_bytes: Some(FETCH_BYTES),
                    max_wait_ms: 0,
                };
                let t = Instant::now();
                let response = client.fetch(request).await.map_err(err(what(next)))?.into_inner();
                latency.record(t.elapsed());
                let n = delivered(&response, next, end).map_err(err(what(next)))?;
                meter.add(n);
                (bytes, fetches) = (bytes + n, fetches + 1);
                next = response.next_offset;
            }
        }
        Transport::GrpcSession => {
            let mut client = grpc_client(served.1).await?;
            let request = pb::ReadSessionRequest {
                namespace: DEFAULT_NAMESPACE.into(),
                stream: stream.into(),
                partition: p,
                offset: next,
                max_bytes: Some(SESSION_MESSAGE_BYTES),
            };
            let mut answers = client.read_session(request).await.map_err(err(what(next)))?.into_inner();
            let mut t = Instant::now();
            // The session tails the partition: the client hangs up (drops it) at `end`.
            while next < end {
                let response = answers.message().await.map_err(err(what(next)))?.ok_or_else(|| {
                    BenchError::Operation { what: what(next), message: "the session ended early".into() }
                })?;
                latency.record(t.elapsed());
                t = Instant::now();
                let n = delivered(&response, next, end).map_err(err(what(next)))?;
                meter.add(n);
                (bytes, fetches) = (bytes + n, fetches + 1);
                next = response.next_offset;
            }
        }
    }
    Ok((bytes, fetches, latency))
}

/// The payload bytes of a gRPC answer to a read at `next`, or why it made no progress.
fn delivered(response: &pb::FetchResponse, next: u64, end: u64) -> Result<u64, String> {
    if response.entries.is_empty() || response.next_offset <= next {
        return Err(format!("no progress before the end offset {end}"));
    }
    Ok(response.entries.iter().map(|e| e.payload.len() as u64).sum())
}

/// One pass: every partition of `stream` read from its first offset to `ends[p]`, one client
/// per partition, concurrently.
async fn pass(
    transport: Transport,
    served: &Served,
    stream: &str,
    ends: &[u64],
    meter: &Arc<Meter>,
) -> Result<OpStats, BenchError> {
    let started = Instant::now();
    let reads = ends.iter().enumerate().map(|(p, &end)| {
        read_partition(transport, (served.http, served.grpc), stream, p as u32, 0, end, meter)
    });
    let mut out = OpStats::default();
    for r in futures::future::join_all(reads).await {
        let (bytes, fetches, latency) = r?;
        out.bytes += bytes;
        out.ops += fetches;
        out.latency.merge(&latency);
    }
    out.elapsed = started.elapsed();
    Ok(out)
}

/// Passes until the phase has run for the knobs' duration (one pass with `--count`).
async fn passes<F, Fut>(ctx: &BenchContext, mut one: F) -> Result<(OpStats, u64), BenchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<OpStats, BenchError>>,
{
    let started = Instant::now();
    let mut total = OpStats::default();
    let mut n = 0u64;
    loop {
        let p = one().await?;
        total.bytes += p.bytes;
        total.ops += p.ops;
        total.latency.merge(&p.latency);
        n += 1;
        let done = match ctx.load() {
            Load::Ops(_) => true,
            Load::Time(d) => started.elapsed() >= d,
        };
        if done {
            total.elapsed = started.elapsed();
            return Ok((total, n));
        }
    }
}

/// Raw GETs of `paths` with `concurrency` tasks, whole passes for as long as a phase.
async fn raw_get_passes(
    ctx: &BenchContext,
    store: &Arc<dyn ObjectStore>,
    paths: &[ObjectPath],
    concurrency: usize,
    label: &str,
) -> Result<(OpStats, Sampled), BenchError> {
    let meter = Meter::new();
    let sampler = ctx.sampler(&meter, label, ctx.goal());
    let got = passes(ctx, || baseline::raw_gets(store.clone(), paths.to_vec(), concurrency, &meter)).await;
    let sampled = sampler.stop().await;
    Ok((got?.0, sampled))
}

/// What cold passes fetched from storage.
#[derive(Debug, Default, Clone, Copy)]
struct Fetched {
    gets: u64,
    bytes: u64,
}

/// Cold passes: each through a fresh reader (empty caches) whose fetches are counted.
async fn cold_passes(
    ctx: &BenchContext,
    transport: Transport,
    stream: &str,
    ends: &[u64],
    label: &str,
) -> Result<(OpStats, u64, Fetched, Sampled), BenchError> {
    let meter = Meter::new();
    let sampler = ctx.sampler(&meter, label, ctx.goal());
    let fetched = std::sync::Mutex::new(Fetched::default());
    let got = passes(ctx, || async {
        let wal = Arc::new(CountingStore::new(ctx.stack.wal.clone()));
        let compacted = Arc::new(CountingStore::new(ctx.stack.compacted.clone()));
        let deps =
            ReaderDeps { meta: ctx.stack.meta.clone(), wal: wal.clone(), compacted: compacted.clone() };
        let reader =
            Reader::new(ctx.config.service.reader.clone(), deps).map_err(err("reader configuration"))?;
        let served = Served::start(ctx, reader).await?;
        let p = pass(transport, &served, stream, ends, &meter).await;
        served.stop().await;
        let (wal, compacted) = (wal.counts(), compacted.counts());
        let mut f = fetched.lock().unwrap_or_else(|e| e.into_inner());
        f.gets += wal.gets + compacted.gets;
        f.bytes += wal.bytes_fetched + compacted.bytes_fetched;
        p
    })
    .await;
    let sampled = sampler.stop().await;
    let (stats, n) = got?;
    let fetched = *fetched.lock().unwrap_or_else(|e| e.into_inner());
    Ok((stats, n, fetched, sampled))
}

/// A stream of `partitions` written with `mib_of_payload` MiB of payload (not measured; with
/// `--count`, that many entries); its logs, their end offsets, the payload bytes appended
/// (warm-up entries included) and the WAL objects written.
async fn write_stream(
    ctx: &BenchContext,
    name: &str,
    partitions: u32,
    mib_of_payload: u64,
) -> Result<(Vec<LogRef>, Vec<u64>, u64, Vec<ObjectMeta>), BenchError> {
    let stream = ctx
        .stack
        .catalog
        .create_stream(DEFAULT_NAMESPACE, name, partitions, Default::default())
        .await
        .map_err(err(format!("creating stream {name}")))?;
    let logs: Vec<LogRef> = (0..stream.partition_count()).filter_map(|p| stream.log_ref(p)).collect();
    let ends = crate::scenarios::warm_up(ctx.writer()?, &logs).await?;
    let before = crate::scenarios::wal_paths(ctx).await?;
    let meter = Meter::new();
    let load = match ctx.knobs.count {
        0 => Load::Ops(((mib_of_payload << 20) / ctx.knobs.entry_bytes as u64).max(1)),
        n => Load::Ops(n),
    };
    let label = format!("consume: write {name}");
    let ops = match load {
        Load::Ops(n) => n,
        Load::Time(_) => 0,
    };
    let sampler = ctx.sampler(&meter, &label, Goal::Ops(ops));
    let appended = crate::scenarios::append_load(ctx, &logs, &meter, ends, load).await;
    sampler.stop().await;
    let appended = appended?;
    let written = crate::scenarios::new_wal_objects(ctx, &before).await?;
    let payload = appended.stats.bytes + logs.len() as u64 * crate::scenarios::WARM_UP.len() as u64;
    Ok((logs, appended.ends, payload, written))
}

/// Compacts every log of `logs` (ranges close at once); returns the compacted objects.
async fn compact_all(
    ctx: &BenchContext,
    logs: &[LogRef],
    stream: &str,
) -> Result<Vec<ObjectMeta>, BenchError> {
    let config = CompactorConfig { max_range_age: Duration::ZERO, ..ctx.config.service.compactor.clone() };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let compactor = Compactor::new(
        config,
        CompactorDeps {
            meta: ctx.stack.meta.clone(),
            wal: ctx.stack.wal.clone(),
            compacted: ctx.stack.compacted.clone(),
            clock,
            tokens: Arc::new(RandomTokens),
        },
    )
    .map_err(err("compactor"))?;
    let meter = Meter::new();
    let sampler = ctx.sampler(&meter, "consume: compact the data set", Goal::Ops(logs.len() as u64));
    let progress = |p: &Progress| {
        if let Progress::RangeCompacted(range) = p {
            meter.add(range.payload_bytes);
        }
    };
    let mut outcome = Ok(());
    for _ in 0..100 {
        let pass = compactor.compact_once(logs, &progress).await;
        if let Some((log, e)) = pass.failed.first() {
            outcome =
                Err(BenchError::Operation { what: format!("compaction of log {log}"), message: e.clone() });
            break;
        }
        if pass.ranges.is_empty() {
            break;
        }
    }
    sampler.stop().await;
    outcome?;
    let files = baseline::list(&*ctx.stack.compacted, &format!("{DEFAULT_NAMESPACE}/{stream}/")).await?;
    if files.is_empty() {
        return Err(BenchError::Operation {
            what: "compaction".into(),
            message: "no file was written".into(),
        });
    }
    Ok(files)
}

fn rss_goal(r: &mut ScenarioReport, name: &str, peak: Option<u64>, bound: u64, what: &str) {
    match peak {
        Some(p) => {
            r.figures.push(figure(&format!("peak RSS, {name}"), mib(p), "MiB"));
            r.targets.push(Target::at_most(
                &format!("reader peak RSS, {name} ≤ {what} + 256 MiB"),
                mib(p),
                mib(bound + (256 << 20)),
                "MiB",
            ));
        }
        None => {
            r.notes.push("RSS is not available on this platform; the memory targets are not checked.".into())
        }
    }
}

/// Writes the data set (`--data-mib` over `--logs` logs) and the catch-up log
/// (`--catch-up-mib`), in that order.
pub(crate) async fn prepare(ctx: &BenchContext) -> Result<Vec<DataSet>, BenchError> {
    let data_mib = match ctx.knobs.data_mib {
        0 => 64,
        m => m,
    };
    let name = format!("bench-consume-{}", ctx.run_id);
    let (logs, ends, payload, written) = write_stream(ctx, &name, ctx.knobs.logs, data_mib).await?;
    let data = DataSet::new(&logs, ends, payload, &written);
    let catch_up_name = format!("bench-catch-up-{}", ctx.run_id);
    let (logs, ends, payload, written) = write_stream(ctx, &catch_up_name, 1, ctx.knobs.catch_up_mib).await?;
    Ok(vec![data, DataSet::new(&logs, ends, payload, &written)])
}

/// The scenario's phases over the data sets of [`prepare`].
pub(crate) async fn measure(ctx: &BenchContext, data: Vec<DataSet>) -> Result<ScenarioReport, BenchError> {
    let [data, catch_up] = <[DataSet; 2]>::try_from(data).map_err(|d| {
        BenchError::Config(format!("the consume scenario measures two data sets, {} given", d.len()))
    })?;
    let (name, logs, ends, payload, written) =
        (data.stream.clone(), data.logs(), data.ends.clone(), data.payload, data.objects()?);
    let wal_bytes: u64 = written.iter().map(|m| m.size).sum();
    let wal_paths: Vec<ObjectPath> = written.iter().map(|m| m.path.clone()).collect();
    let concurrency = logs.len();
    let mut r = ctx.report(Scenario::Consume);
    let mut peaks: Vec<(&str, Option<u64>)> = Vec::new();
    let mut samples: Vec<crate::meter::Sample> = Vec::new();
    let mut t0 = 0.0f64;
    let mut keep = |s: &Sampled, elapsed: f64| {
        samples.extend(s.samples.iter().map(|x| crate::meter::Sample { t_s: x.t_s + t0, ..*x }));
        t0 += elapsed;
    };

    // Cold, over each transport.
    let mut cold = Vec::new();
    for transport in Transport::ALL {
        let label = format!("consume: cold, {}", transport.name());
        let (stats, n, fetched, s) = cold_passes(ctx, transport, &name, &ends, &label).await?;
        keep(&s, stats.elapsed.as_secs_f64());
        peaks.push(("cold", s.peak_rss));
        cold.push((transport, stats, n, fetched));
    }

    // Raw GET of the same WAL objects at the clients' concurrency (after the reader's phases,
    // so that their RSS is not the baseline's).
    let (get, s) = raw_get_passes(ctx, &ctx.stack.wal, &wal_paths, concurrency, "consume: raw GET").await?;
    keep(&s, get.elapsed.as_secs_f64());

    // Catch-up: one log from its first offset, one client.
    let (catch_up_name, catch_up_ends, catch_up_payload, catch_up_written) =
        (catch_up.stream.clone(), catch_up.ends.clone(), catch_up.payload, catch_up.objects()?);
    let catch_up_wal: u64 = catch_up_written.iter().map(|m| m.size).sum();
    let mut catch_up_paths: Vec<ObjectMeta> = catch_up_written;
    catch_up_paths.sort_by(|a, b| a.path.as_str().cmp(b.path.as_str()));
    let catch_up_paths: Vec<ObjectPath> = catch_up_paths.into_iter().map(|m| m.path).collect();
    let (catch_up, catch_up_n, catch_up_fetched, s) =
        cold_passes(ctx, Transport::Http, &catch_up_name, &catch_up_ends, "consume: catch-up, HTTP").await?;
    keep(&s, catch_up.elapsed.as_secs_f64());
    peaks.push(("catch-up", s.peak_rss));
    let (sequential_get, s) =
        raw_get_passes(ctx, &ctx.stack.wal, &catch_up_paths, 1, "consume: raw sequential GET").await?;
    keep(&s, sequential_get.elapsed.as_secs_f64());

    // Cached: one reader whose WAL cache holds the whole data set, warmed by one pass. After
    // the cold and catch-up phases, whose RSS would otherwise hold what the allocator kept of
    // this cache.
    let cache =
        ctx.config.service.reader.object_cache_bytes.max((wal_bytes + wal_bytes / 4) as usize + (64 << 20));
    let deps = ReaderDeps {
        meta: ctx.stack.meta.clone(),
        wal: ctx.stack.wal.clone(),
        compacted: ctx.stack.compacted.clone(),
    };
    let cached_reader =
        Reader::new(ReaderConfig { object_cache_bytes: cache, ..ctx.config.service.reader.clone() }, deps)
            .map_err(err("reader configuration"))?;
    let served = Served::start(ctx, cached_reader).await?;
    pass(Transport::Http, &served, &name, &ends, &Meter::new()).await?;
    let mut cached = Vec::new();
    for transport in Transport::ALL {
        let meter = Meter::new();
        let sampler = ctx.sampler(&meter, &format!("consume: cached, {}", transport.name()), ctx.goal());
        let cpu_before = crate::sys::cpu_seconds();
        let got = passes(ctx, || pass(transport, &served, &name, &ends, &meter)).await;
        let cpu_s = cpu_before.zip(crate::sys::cpu_seconds()).map(|(a, b)| b - a);
        let s = sampler.stop().await;
        let (stats, n) = got?;
        keep(&s, stats.elapsed.as_secs_f64());
        peaks.push(("cached", s.peak_rss));
        cached.push((transport, stats, n, cpu_s));
    }
    served.stop().await;

    // Compacted: the data set compacted, read cold over HTTP; raw GET of its files.
    let files = compact_all(ctx, &logs, &name).await?;
    let compacted_bytes: u64 = files.iter().map(|m| m.size).sum();
    let file_paths: Vec<ObjectPath> = files.iter().map(|m| m.path.clone()).collect();
    let (compacted, compacted_n, compacted_fetched, s) =
        cold_passes(ctx, Transport::Http, &name, &ends, "consume: compacted cold, HTTP").await?;
    keep(&s, compacted.elapsed.as_secs_f64());
    peaks.push(("compacted", s.peak_rss));
    let (compacted_get, s) =
        raw_get_passes(ctx, &ctx.stack.compacted, &file_paths, concurrency, "consume: raw GET, compacted")
            .await?;
    keep(&s, compacted_get.elapsed.as_secs_f64());

    // The report.
    r.figures = vec![
        figure("data set (payload)", mib(payload), "MiB"),
        figure("WAL objects", written.len() as f64, ""),
        figure("WAL bytes", mib(wal_bytes), "MiB"),
        figure("raw GET, 1 task per log", get.mb_s(), "MB/s"),
        figure("reader cache (configured)", mib(ctx.config.service.reader.object_cache_bytes as u64), "MiB"),
        figure("read-ahead budget", mib(ctx.config.service.reader.read_ahead_bytes as u64), "MiB"),
        figure("fetch size", mib(FETCH_BYTES), "MiB"),
    ];
    r.latencies.push(Latency::of("raw GET of a WAL object", &get.latency));
    let mut cold_http = None;
    for (transport, stats, n, fetched) in &cold {
        let t = transport.name();
        let per_wal = per_second(wal_bytes as f64 * *n as f64 / 1e6, stats.elapsed);
        r.figures.push(figure(&format!("cold consume, {t} (payload delivered)"), stats.mb_s(), "MB/s"));
        r.figures.push(figure(&format!("cold consume, {t} (WAL bytes covered)"), per_wal, "MB/s"));
        r.figures.push(figure(&format!("cold {t}: passes"), *n as f64, ""));
        r.figures.push(figure(&format!("cold {t}: GETs per pass"), fetched.gets as f64 / *n as f64, ""));
        r.figures.push(figure(&format!("cold {t}: fetched from storage"), mib(fetched.bytes), "MiB"));
        r.figures.push(figure(&format!("cold {t}: delivered to clients"), mib(stats.bytes), "MiB"));
        r.latencies.push(Latency::of(&format!("cold {t} ({})", transport.unit()), &stats.latency));
        r.ratios.push(Ratio::new(
            &format!("cold consume, {t} vs raw GET (same WAL bytes)"),
            per_wal,
            get.mb_s(),
            "MB/s",
        ));
        r.targets.push(Target::at_least(
            &format!("cold consume ({t}, RAW) ≥ 0.8 × raw GET MB/s"),
            crate::report::ratio(per_wal, get.mb_s()).unwrap_or(0.0),
            0.8,
            "×",
        ));
        let fpd = crate::report::ratio(fetched.bytes as f64, stats.bytes as f64).unwrap_or(f64::MAX);
        r.ratios.push(Ratio::new(
            &format!("cold {t}: bytes fetched vs delivered"),
            mib(fetched.bytes),
            mib(stats.bytes),
            "MiB",
        ));
        if *transport == Transport::Http {
            cold_http = Some(fpd);
        }
    }
    if let Some(fpd) = cold_http {
        r.targets.push(Target::at_most(
            &format!("cold: fetched ÷ delivered ≤ 1.1 ({concurrency} readers of logs sharing objects)"),
            fpd,
            1.1,
            "×",
        ));
    }
    for (transport, stats, n, cpu_s) in &cached {
        let t = transport.name();
        r.figures.push(figure(&format!("cached consume, {t} (wall)"), stats.mb_s(), "MB/s"));
        r.figures.push(figure(&format!("cached {t}: passes"), *n as f64, ""));
        r.latencies.push(Latency::of(&format!("cached {t} ({})", transport.unit()), &stats.latency));
        // CPU time comes in ticks of 10 ms: a phase shorter than a tick counts one.
        let per_core = cpu_s.map(|c| stats.bytes as f64 / 1e6 / c.max(0.01));
        match per_core {
            Some(pc) => {
                r.figures.push(figure(&format!("cached consume, {t} per CPU second"), pc, "MB/s per core"));
                if *transport == Transport::Http {
                    r.targets.push(Target::at_least(
                        "cached consume over HTTP ≥ 1 GB/s per core (server and clients)",
                        pc,
                        1000.0,
                        "MB/s",
                    ));
                }
            }
            None => r.notes.push("CPU time is not available; the per-core target is not checked.".into()),
        }
    }
    r.figures.push(figure("reader cache (cached phases)", mib(cache as u64), "MiB"));

    let catch_up_per_wal = per_second(catch_up_wal as f64 * catch_up_n as f64 / 1e6, catch_up.elapsed);
    r.figures.extend([
        figure("catch-up log (payload)", mib(catch_up_payload), "MiB"),
        figure("catch-up WAL objects", catch_up_paths.len() as f64, ""),
        figure("raw sequential GET", sequential_get.mb_s(), "MB/s"),
        figure("catch-up, HTTP (WAL bytes covered)", catch_up_per_wal, "MB/s"),
        figure("catch-up: passes", catch_up_n as f64, ""),
        figure("catch-up: fetched from storage", mib(catch_up_fetched.bytes), "MiB"),
        figure("catch-up: delivered", mib(catch_up.bytes), "MiB"),
    ]);
    r.latencies.push(Latency::of("catch-up fetch, HTTP (8 MiB max)", &catch_up.latency));
    r.ratios.push(Ratio::new(
        "catch-up vs raw sequential GET (same WAL bytes)",
        catch_up_per_wal,
        sequential_get.mb_s(),
        "MB/s",
    ));
    r.targets.push(Target::at_least(
        "catch-up of one log ≥ 0.8 × raw sequential GET MB/s",
        crate::report::ratio(catch_up_per_wal, sequential_get.mb_s()).unwrap_or(0.0),
        0.8,
        "×",
    ));

    let compacted_per_file = per_second(compacted_bytes as f64 * compacted_n as f64 / 1e6, compacted.elapsed);
    r.figures.extend([
        figure("compacted objects (files and companions)", files.len() as f64, ""),
        figure("compacted bytes", mib(compacted_bytes), "MiB"),
        figure("raw GET, compacted objects", compacted_get.mb_s(), "MB/s"),
        figure("compacted cold consume, HTTP (payload delivered)", compacted.mb_s(), "MB/s"),
        figure("compacted cold consume, HTTP (compacted bytes covered)", compacted_per_file, "MB/s"),
        figure("compacted: passes", compacted_n as f64, ""),
        figure("compacted: GETs per pass", compacted_fetched.gets as f64 / compacted_n as f64, ""),
        figure("compacted: fetched from storage", mib(compacted_fetched.bytes), "MiB"),
        figure("compacted: delivered", mib(compacted.bytes), "MiB"),
    ]);
    r.latencies.push(Latency::of("compacted cold fetch, HTTP (8 MiB max)", &compacted.latency));
    r.latencies.push(Latency::of("raw GET of a compacted object", &compacted_get.latency));
    r.ratios.push(Ratio::new(
        "compacted cold consume vs raw GET (same compacted bytes)",
        compacted_per_file,
        compacted_get.mb_s(),
        "MB/s",
    ));
    r.ratios.push(Ratio::new(
        "compacted cold: bytes fetched vs delivered",
        mib(compacted_fetched.bytes),
        mib(compacted.bytes),
        "MiB",
    ));
    r.targets.push(Target::at_least(
        "cold consume (HTTP, compacted) ≥ 0.8 × raw GET MB/s",
        crate::report::ratio(compacted_per_file, compacted_get.mb_s()).unwrap_or(0.0),
        0.8,
        "×",
    ));

    let config_bound =
        (ctx.config.service.reader.object_cache_bytes + ctx.config.service.reader.read_ahead_bytes) as u64;
    let peak = |which: &str| peaks.iter().filter(|(n, _)| *n == which).filter_map(|(_, p)| *p).max();
    let cold_peak = ["cold", "catch-up"].iter().filter_map(|w| peak(w)).max();
    rss_goal(&mut r, "cold and catch-up phases", cold_peak, config_bound, "cache + read-ahead");
    // The compacted phase runs after the cached phases and an in-process compaction: its RSS
    // holds what the allocator kept of them, so it is shown but not held to the bound.
    if let Some(p) = peak("compacted") {
        r.figures.push(figure("peak RSS, compacted phase (after the cached phases)", mib(p), "MiB"));
    }
    rss_goal(
        &mut r,
        "cached phases",
        peak("cached"),
        (cache + ctx.config.service.reader.read_ahead_bytes) as u64,
        "cache (sized to the data set) + read-ahead",
    );
    r.samples = samples;
    r.notes.push(format!(
        "Clients and server share this process: HTTP/1.1 and gRPC on loopback, one client per partition ({concurrency} \
         for the data set), {} MiB per fetch (HTTP and unary gRPC `Fetch`) or one gRPC `ReadSession` per partition \
         streaming answers of up to {} MiB; raw frames over HTTP (no JSON). Bytes delivered are payload bytes counted \
         by the clients. Every phase runs whole passes until it has run for the phase duration; cold, catch-up and \
         compacted passes each use a fresh reader (empty caches; the OS page cache of the object store stays warm for \
         every phase and baseline alike). Per-core figures divide by this process's CPU time, clients included. RSS is \
         this process's, clients included (`lakestream bench` measures in a process of its own with no writer; \
         another process wrote the data sets before it started). The WAL read mode is {:?}. The time series runs through the \
         phases in order (each measured phase before its baseline, so that its RSS is its own): cold HTTP, cold gRPC, \
         cold gRPC session, raw GET, catch-up, raw sequential GET, cached HTTP, cached gRPC, cached gRPC session, \
         compacted cold, raw GET of the compacted files.",
        FETCH_BYTES >> 20,
        SESSION_MESSAGE_BYTES >> 20,
        ctx.config.service.reader.wal_read,
    ));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_counted_across_chunks() {
        let mut body = Vec::new();
        for len in [3u32, 0, 70_000] {
            body.extend_from_slice(&[0u8; 20]);
            body.extend_from_slice(&len.to_be_bytes());
            body.extend(std::iter::repeat_n(7u8, len as usize));
        }
        let body = Bytes::from(body);
        for chunk in [1usize, 5, 23, 24, 1000, body.len()] {
            let mut c = FrameCounter::default();
            for part in body.chunks(chunk) {
                c.feed(Bytes::copy_from_slice(part));
            }
            assert_eq!((c.entries, c.payload), (3, 70_003), "chunks of {chunk}");
        }
    }
}
