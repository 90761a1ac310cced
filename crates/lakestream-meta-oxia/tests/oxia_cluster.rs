//! Faults of the real stack (issue #16): an Oxia cluster as production runs it — a
//! coordinator and three data servers, replication factor 3, four shards — on loopback, and
//! the leader of the busiest shard killed with SIGKILL while producers append; then the
//! killed server is restarted on its directories and must be taken back.
//!
//! It prints what it measured (acknowledged, lost, duplicated, unknown outcomes, recovery
//! time, acknowledgements per shard per second); run it with `--nocapture` to see them.
//!
//! It starts its own cluster from the binary in `LAKESTREAM_TEST_OXIA_BIN` and fails with
//! instructions when that is not set (it never skips):
//!
//! ```text
//! LAKESTREAM_TEST_OXIA_BIN=$HOME/.cache/oxia/v0.17.1/oxia \
//!     cargo test -p lakestream-meta-oxia --locked --test oxia_cluster -- --nocapture
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lakestream_format::LogId;
use lakestream_format::keys::{self, IndexKey};
use lakestream_meta::{MetaError, MetaResult, MetaStore, Record, WriteResult};
use lakestream_meta_oxia::testkit::OxiaCluster;
use lakestream_meta_oxia::{OxiaConfig, OxiaStore, ShardId};

/// How long producers issue new puts (retries go on until [`DRAIN_FOR`] after that).
const PRODUCE_FOR: Duration = Duration::from_secs(9);
/// When the leader is killed, after producing started.
const KILL_AFTER: Duration = Duration::from_secs(3);
/// How long producers keep retrying puts that did not commit once producing stopped.
const DRAIN_FOR: Duration = Duration::from_secs(20);
/// The bound on appends resuming on the killed shard after the kill.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);
/// The bound on the restarted server being taken back (the coordinator retries pushing it
/// the assignments with a back-off from 10 s up, grown while the server was down).
const CONVERGENCE_BOUND: Duration = Duration::from_secs(60);
/// The client's request timeout: bounds how long a put waits for a stream.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Puts each producer keeps in flight (pipelined on its shard's ordered stream).
const WINDOW: usize = 4;
/// Producers per log; they alternate between two clients (two writer processes).
const PRODUCERS_PER_LOG: usize = 2;
/// Logs on the shard whose leader is killed, and on each other shard.
const HOT_LOGS: usize = 3;
/// A pause before re-issuing a failed put, so a client without a route does not spin.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// The deltas of each put: one entry, and a payload size that varies with the sequence
/// number (static, so that the put is issued — queued on its stream — when it is called).
const DELTAS: [[u64; 2]; 4] = [[1, 48], [1, 49], [1, 50], [1, 51]];

/// Serializes the tests: each runs a cluster, and two at once on a small machine would
/// disturb each other's timing.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A put's value: `p{producer} s{seq} a{attempt}`, padded to the size its deltas announce.
fn value(producer: usize, seq: u64, attempt: u64) -> (Bytes, &'static [u64]) {
    let deltas = &DELTAS[(seq % 4) as usize];
    let mut text = format!("p{producer:03} s{seq:08} a{attempt:08} ");
    text.extend(std::iter::repeat_n('.', deltas[1] as usize - text.len()));
    (Bytes::from(text), deltas)
}

/// The (producer, seq, attempt) tag of a value.
fn tag(value: &[u8]) -> Option<(usize, u64, u64)> {
    let text = std::str::from_utf8(value).ok()?;
    let mut fields = text.split(' ');
    let producer = fields.next()?.strip_prefix('p')?.parse().ok()?;
    let seq = fields.next()?.strip_prefix('s')?.parse().ok()?;
    let attempt = fields.next()?.strip_prefix('a')?.parse().ok()?;
    Some((producer, seq, attempt))
}

/// What one producer saw.
#[derive(Debug, Default)]
struct ProducerReport {
    producer: usize,
    log: u64,
    /// Acknowledged puts: seq → (attempt, key, value, issued, acknowledged).
    acked: BTreeMap<u64, (u64, String, Bytes, Instant, Instant)>,
    /// Sequence numbers with at least one attempt of unknown outcome.
    unknown_seqs: BTreeSet<u64>,
    /// Attempts that failed with an unknown outcome.
    unknown_attempts: u64,
    /// Attempts that failed as not applied (`Unavailable`).
    unavailable_attempts: u64,
    /// Any other failure (none is expected).
    other_errors: Vec<String>,
    /// Sequence numbers issued but never acknowledged before the drain ended.
    abandoned: Vec<u64>,
}

/// One producer: sequenced puts on its log, [`WINDOW`] in flight, new ones until `stop`,
/// failed ones retried (as a new attempt, issued behind everything issued before) until
/// `drain_until`.
async fn produce(
    store: OxiaStore,
    producer: usize,
    log: LogId,
    stop: Instant,
    drain_until: Instant,
    acked_count: Arc<AtomicU64>,
) -> ProducerReport {
    let (partition, prefix) = (keys::partition(log), keys::index_prefix(log));
    let mut report = ProducerReport { producer, log: log.0, ..ProducerReport::default() };
    let mut retries: VecDeque<u64> = VecDeque::new();
    let (mut next_seq, mut attempt) = (0u64, 0u64);
    let mut in_flight = FuturesUnordered::new();
    loop {
        let now = Instant::now();
        while in_flight.len() < WINDOW {
            let seq = match retries.pop_front() {
                Some(seq) if now < drain_until => seq,
                Some(seq) => {
                    report.abandoned.push(seq);
                    continue;
                }
                None if now < stop => {
                    next_seq += 1;
                    next_seq
                }
                None => break,
            };
            attempt += 1;
            let (value, deltas) = value(producer, seq, attempt);
            // Called here, so queued on the shard's stream in this producer's issue order.
            let put = store.sequenced_put(&partition, &prefix, deltas, value.clone());
            let (issued, this_attempt) = (Instant::now(), attempt);
            in_flight.push(async move { (seq, this_attempt, value, issued, put.await) });
        }
        let Some((seq, attempt, value, issued, result)) = in_flight.next().await else {
            break;
        };
        match result {
            Ok(written) => {
                acked_count.fetch_add(1, Ordering::Relaxed);
                let previous =
                    report.acked.insert(seq, (attempt, written.key, value, issued, Instant::now()));
                assert!(previous.is_none(), "producer {producer}: seq {seq} acknowledged twice");
            }
            Err(MetaError::Unavailable(_)) => {
                report.unavailable_attempts += 1;
                retries.push_back(seq);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(MetaError::OutcomeUnknown(_)) => {
                report.unknown_attempts += 1;
                report.unknown_seqs.insert(seq);
                retries.push_back(seq);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(other) => {
                report.other_errors.push(format!("seq {seq} attempt {attempt}: {other}"));
                // Treated like an unknown outcome: retried, and a second copy is allowed.
                report.unknown_seqs.insert(seq);
                retries.push_back(seq);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
    report
}

/// Picks log ids so that the shard of the first one holds [`HOT_LOGS`] logs and every other
/// shard one: the first shard is the busiest.
fn pick_logs(cluster: &OxiaCluster) -> (ShardId, Vec<(LogId, ShardId)>) {
    let map = cluster.shard_map();
    let shard_of = |log: LogId| map.shard_for_key(&keys::partition(log)).expect("every hash has a shard").id;
    let hot = shard_of(LogId(1000));
    let mut wanted: BTreeMap<ShardId, usize> =
        map.shards().iter().map(|s| (s.id, if s.id == hot { HOT_LOGS } else { 1 })).collect();
    let mut logs = Vec::new();
    for id in 1000.. {
        let shard = shard_of(LogId(id));
        if let Some(left) = wanted.get_mut(&shard)
            && *left > 0
        {
            *left -= 1;
            logs.push((LogId(id), shard));
        }
        if wanted.values().all(|left| *left == 0) {
            break;
        }
    }
    (hot, logs)
}

/// Reads a log's whole index back: its records in key order (the scan and the key list must
/// agree).
async fn read_log(store: &OxiaStore, log: LogId) -> Vec<Record> {
    let (partition, first, last) = (keys::partition(log), keys::first_key(log), keys::last_key(log));
    let records = store.scan(&partition, &first, &last, None).await.expect("scan the log's index");
    let listed = store.list(&partition, &first, &last).await.expect("list the log's index");
    let scanned: Vec<&str> = records.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(scanned, listed, "log {}: scan and list disagree", log.0);
    records
}

/// Counts from checking every log against what the producers were told.
#[derive(Debug, Default)]
struct Verdict {
    records: usize,
    lost: Vec<String>,
    duplicated: usize,
    unexplained_duplicates: Vec<String>,
    gaps: Vec<String>,
    out_of_order: Vec<String>,
    foreign: Vec<String>,
}

/// Checks the logs read back against the producers' reports: every acknowledged put present
/// with its value; each log contiguous (each key continues the previous by its deltas); each
/// producer's records in the order of its attempts (commit order = issue order on one
/// stream); a (producer, seq) twice only if an attempt of it had an unknown outcome.
fn verify(logs: &BTreeMap<u64, Vec<Record>>, reports: &[ProducerReport]) -> Verdict {
    let mut verdict = Verdict::default();
    let mut copies: HashMap<(usize, u64), usize> = HashMap::new();
    let mut last_attempt: HashMap<usize, (u64, String)> = HashMap::new();
    let producers_of_log: HashMap<usize, u64> = reports.iter().map(|r| (r.producer, r.log)).collect();
    for (&log, records) in logs {
        verdict.records += records.len();
        let (mut end, mut size) = (0u64, 0u64);
        for record in records {
            let Some((producer, seq, attempt)) = tag(&record.value) else {
                verdict.foreign.push(format!("{}: untagged value", record.key));
                continue;
            };
            if producers_of_log.get(&producer) != Some(&log) {
                verdict.foreign.push(format!("{}: producer {producer} does not write log {log}", record.key));
            }
            let deltas = value(producer, seq, attempt).1;
            (end, size) = (end + deltas[0], size + deltas[1]);
            let key = IndexKey::parse(&record.key).expect("an index key");
            if (key.log_id.0, key.end_offset, key.cumulative_size) != (log, end, size) {
                verdict.gaps.push(format!(
                    "{}: expected end {end} size {size} (value {} bytes)",
                    record.key,
                    record.value.len()
                ));
                (end, size) = (key.end_offset, key.cumulative_size);
            }
            if let Some((previous, previous_key)) =
                last_attempt.insert(producer, (attempt, record.key.clone()))
                && previous >= attempt
            {
                verdict.out_of_order.push(format!(
                    "producer {producer}: attempt {attempt} at {} after attempt {previous} at {previous_key}",
                    record.key
                ));
            }
            *copies.entry((producer, seq)).or_default() += 1;
        }
    }
    let present: HashMap<&str, &Bytes> =
        logs.values().flatten().map(|r| (r.key.as_str(), &r.value)).collect();
    for report in reports {
        for (seq, (attempt, key, value, _, _)) in &report.acked {
            if present.get(key.as_str()) != Some(&value) {
                verdict.lost.push(format!(
                    "producer {} seq {seq} attempt {attempt}: acknowledged at {key}, found {:?}",
                    report.producer,
                    present.get(key.as_str()).and_then(|v| tag(v))
                ));
            }
        }
    }
    let unknown: HashMap<usize, &BTreeSet<u64>> =
        reports.iter().map(|r| (r.producer, &r.unknown_seqs)).collect();
    for (&(producer, seq), &count) in &copies {
        if count > 1 {
            verdict.duplicated += count - 1;
            if !unknown.get(&producer).is_some_and(|seqs| seqs.contains(&seq)) {
                verdict
                    .unexplained_duplicates
                    .push(format!("producer {producer} seq {seq}: {count} copies, no unknown outcome"));
            }
        }
    }
    verdict
}

fn first_lines(items: &[String]) -> String {
    items.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
}

/// The leader of the busiest shard is killed with SIGKILL while twelve producers, on two
/// clients, append to six logs (three on that shard). Every acknowledged append must be found
/// afterwards, each log contiguous, each producer's appends in its issue order, a duplicate
/// only where an attempt's outcome was unknown; and appends on the killed shard must resume
/// within [`RECOVERY_BOUND`].
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_of_a_busy_shard_is_killed_under_load_and_no_acknowledged_write_is_lost() {
    let _one_cluster = ONE_CLUSTER_AT_A_TIME.lock().await;
    let test_started = Instant::now();
    let mut cluster = OxiaCluster::start().await;
    let cluster_started = test_started.elapsed();
    println!("cluster up in {cluster_started:?}, dir {}", cluster.dir().display());
    for line in cluster.command_lines() {
        println!("  {line}");
    }
    let leaders = cluster.wait_for_leaders(Duration::from_secs(30)).await;
    println!("leaders (shard → server): {leaders:?}");

    let config = OxiaConfig { request_timeout: REQUEST_TIMEOUT, ..OxiaConfig::new(cluster.addresses()) };
    let stores = [
        OxiaStore::connect(config.clone()).await.expect("connect the first client"),
        OxiaStore::connect(config.clone()).await.expect("connect the second client"),
    ];
    let (hot, logs) = pick_logs(&cluster);
    println!("logs (log → shard): {logs:?}; busiest shard {hot}");

    let start = Instant::now();
    let (stop, drain_until) = (start + PRODUCE_FOR, start + PRODUCE_FOR + DRAIN_FOR);
    let acked_by_shard: BTreeMap<ShardId, Arc<AtomicU64>> =
        logs.iter().map(|&(_, shard)| (shard, Arc::new(AtomicU64::new(0)))).collect();
    let mut producers = Vec::new();
    let mut shard_of_producer = HashMap::new();
    for (i, &(log, shard)) in logs.iter().enumerate() {
        for j in 0..PRODUCERS_PER_LOG {
            let producer = i * PRODUCERS_PER_LOG + j;
            shard_of_producer.insert(producer, shard);
            let store = stores[producer % stores.len()].clone();
            let counter = Arc::clone(&acked_by_shard[&shard]);
            producers.push(tokio::spawn(produce(store, producer, log, stop, drain_until, counter)));
        }
    }

    tokio::time::sleep_until((start + KILL_AFTER).into()).await;
    let busiest = acked_by_shard
        .iter()
        .map(|(&shard, count)| (count.load(Ordering::Relaxed), shard))
        .max()
        .map(|(_, shard)| shard)
        .expect("shards");
    let victim = cluster.leader_of(busiest).expect("the busiest shard has a leader");
    let led: Vec<ShardId> = cluster
        .shard_map()
        .shards()
        .iter()
        .filter(|s| cluster.server_index(&s.leader) == Some(victim))
        .map(|s| s.id)
        .collect();
    println!(
        "acknowledged per shard before the kill: {:?}",
        acked_by_shard.iter().map(|(s, c)| (*s, c.load(Ordering::Relaxed))).collect::<Vec<_>>()
    );
    let killed_at = Instant::now();
    cluster.kill9_server(victim);
    println!("killed server {victim} with SIGKILL, leader of shards {led:?}, at {:?}", killed_at - start);
    let new_leaders = cluster.wait_for_leaders(RECOVERY_BOUND).await;
    let leaders_seen = killed_at.elapsed();
    println!("new leaders {new_leaders:?}, seen by the observer {leaders_seen:?} after the kill");

    let mut reports = Vec::new();
    for producer in producers {
        reports.push(producer.await.expect("producer task"));
    }
    let produced_for = start.elapsed();

    // Read back through a client of its own.
    let reader = cluster.store().await;
    let mut read = BTreeMap::new();
    for &(log, _) in &logs {
        read.insert(log.0, read_log(&reader, log).await);
    }
    let verdict = verify(&read, &reports);

    let acknowledged: usize = reports.iter().map(|r| r.acked.len()).sum();
    let unknown: u64 = reports.iter().map(|r| r.unknown_attempts).sum();
    let unavailable: u64 = reports.iter().map(|r| r.unavailable_attempts).sum();
    let abandoned: usize = reports.iter().map(|r| r.abandoned.len()).sum();
    let other_errors: Vec<String> = reports.iter().flat_map(|r| r.other_errors.clone()).collect();
    let acked_after_kill: usize =
        reports.iter().flat_map(|r| r.acked.values()).filter(|(_, _, _, _, at)| *at > killed_at).count();
    // Recovery: from the kill to the first acknowledgement of a put issued after it, per shard
    // the victim led (a put issued after the kill cannot have been answered by the victim).
    let recovery: BTreeMap<ShardId, Option<Duration>> = led
        .iter()
        .map(|&shard| {
            let first = reports
                .iter()
                .filter(|r| shard_of_producer[&r.producer] == shard)
                .flat_map(|r| r.acked.values())
                .filter(|(_, _, _, issued, _)| *issued >= killed_at)
                .map(|(_, _, _, _, at)| *at - killed_at)
                .min();
            (shard, first)
        })
        .collect();
    // The longest pause between acknowledgements on the busiest shard around the kill.
    let mut hot_acks: Vec<Instant> = reports
        .iter()
        .filter(|r| shard_of_producer[&r.producer] == busiest)
        .flat_map(|r| r.acked.values().map(|(_, _, _, _, at)| *at))
        .collect();
    hot_acks.sort();
    let longest_stall = hot_acks.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();

    // Acknowledgements per shard per second: the dip the kill causes, and nothing else.
    for &shard in acked_by_shard.keys() {
        let mut buckets = vec![0u64; (produced_for.as_secs() + 1) as usize];
        for at in reports
            .iter()
            .filter(|r| shard_of_producer[&r.producer] == shard)
            .flat_map(|r| r.acked.values().map(|(_, _, _, _, at)| *at))
        {
            buckets[(at - start).as_secs() as usize] += 1;
        }
        println!("acks per second on shard {shard}: {buckets:?}");
    }
    println!("--- results (produced and drained in {produced_for:?}) ---");
    println!("acknowledged:        {acknowledged} ({acked_after_kill} after the kill)");
    println!("records read back:   {}", verdict.records);
    println!("lost:                {}", verdict.lost.len());
    println!(
        "duplicated:          {} (unexplained: {})",
        verdict.duplicated,
        verdict.unexplained_duplicates.len()
    );
    println!(
        "unknown outcomes:    {unknown} attempts on {} puts",
        reports.iter().map(|r| r.unknown_seqs.len()).sum::<usize>()
    );
    println!("unavailable (retried, not applied): {unavailable}");
    println!("abandoned after the drain: {abandoned}");
    println!("other errors:        {}", other_errors.len());
    println!("recovery (kill → first ack of a put issued after it), per shard the victim led: {recovery:?}");
    println!("longest pause between acks on the busiest shard: {longest_stall:?}");

    assert!(verdict.lost.is_empty(), "acknowledged puts lost:\n{}", first_lines(&verdict.lost));
    assert!(verdict.gaps.is_empty(), "logs not contiguous:\n{}", first_lines(&verdict.gaps));
    assert!(
        verdict.out_of_order.is_empty(),
        "commit order ≠ issue order:\n{}",
        first_lines(&verdict.out_of_order)
    );
    assert!(
        verdict.unexplained_duplicates.is_empty(),
        "duplicates without an unknown outcome:\n{}",
        first_lines(&verdict.unexplained_duplicates)
    );
    assert!(verdict.foreign.is_empty(), "records nobody wrote:\n{}", first_lines(&verdict.foreign));
    assert!(other_errors.is_empty(), "unexpected errors:\n{}", first_lines(&other_errors));
    assert_eq!(abandoned, 0, "puts still failing {DRAIN_FOR:?} after producing stopped");
    let hot_recovery = recovery.get(&busiest).copied().flatten();
    assert!(
        hot_recovery.is_some_and(|r| r <= RECOVERY_BOUND),
        "appends on shard {busiest} did not resume within {RECOVERY_BOUND:?} of the kill: {hot_recovery:?}\n{}",
        cluster.logs_tail(30)
    );

    // The killed server comes back on its directories; the cluster takes it back: every shard
    // has a running leader, the server is initialized (answers for the cluster), and each log
    // reads whole through it and takes one more append.
    let restarted_at = Instant::now();
    cluster.restart_server(victim).await;
    cluster.wait_for_leaders(CONVERGENCE_BOUND).await;
    let initialized_after = cluster.wait_until_initialized(victim, CONVERGENCE_BOUND).await;
    let through_victim = OxiaStore::connect(OxiaConfig {
        request_timeout: Duration::from_secs(10),
        ..OxiaConfig::new([cluster.addresses()[victim].clone()])
    })
    .await
    .expect("connect through the restarted server");
    for &(log, _) in &logs {
        let before = read_log(&through_victim, log).await;
        assert_eq!(before.len(), read[&log.0].len(), "log {} after the restart", log.0);
        let (value, deltas) = value(999, 0, 0);
        let written = through_victim
            .sequenced_put(&keys::partition(log), &keys::index_prefix(log), deltas, value)
            .await
            .expect("append after the restart");
        let last = IndexKey::parse(&before.last().expect("records").key).expect("index key");
        assert_eq!(
            written.key,
            keys::index_key(log, last.end_offset + deltas[0], last.cumulative_size + deltas[1]),
            "log {} continues after the restart",
            log.0
        );
    }
    println!(
        "server {victim} restarted; initialized after {initialized_after:?}; cluster converged (leaders, reads, appends) in {:?}",
        restarted_at.elapsed()
    );
    println!("test took {:?}", test_started.elapsed());
}

/// One append to `log`.
async fn append(store: &OxiaStore, log: LogId) -> MetaResult<WriteResult> {
    let (partition, prefix) = (keys::partition(log), keys::index_prefix(log));
    let (value, deltas) = value(0, 0, 0);
    store.sequenced_put(&partition, &prefix, deltas, value).await
}

/// While a shard has no leader, the coordinator announces it with an empty leader in every
/// assignment — also in those naming other shards' new leaders. A client that refused such
/// an assignment would keep sending to dead leaders for as long as any shard has no leader.
///
/// Four data servers, replication factor 3, eight shards. Server `a` leads shards S and T;
/// server `b` replicates T but not S. `b` is killed (every shard keeps a quorum), then `a`:
/// S elects a new leader among its two live replicas, while T, with one live replica, cannot
/// and stays without one. Appends to S must resume; appends to T fail as not applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_lost_its_quorum_does_not_stop_the_client_following_the_other_shards() {
    let _one_cluster = ONE_CLUSTER_AT_A_TIME.lock().await;
    let mut cluster = OxiaCluster::start_with(4, 3, 8).await;
    let leaders = cluster.wait_for_leaders(Duration::from_secs(30)).await;
    let ensembles = cluster.ensembles();
    let placed = leaders.iter().flat_map(|(&s, &a)| {
        let ensembles = &ensembles;
        leaders.iter().filter(move |&(&t, &leader)| t != s && leader == a).flat_map(move |(&t, _)| {
            ensembles[&t]
                .iter()
                .filter(move |&&b| b != a && !ensembles[&s].contains(&b))
                .map(move |&b| (s, t, a, b))
        })
    });
    let Some((s, t, a, b)) = placed.into_iter().next() else {
        panic!(
            "no server leads two shards placed for this test: leaders {leaders:?}, ensembles {ensembles:?}"
        );
    };
    println!(
        "server {a} leads shard {s} (ensemble {:?}) and shard {t} (ensemble {:?}); server {b} is killed first",
        ensembles[&s], ensembles[&t]
    );
    let map = cluster.shard_map();
    let log_on = |shard: ShardId| {
        (1000..)
            .map(LogId)
            .find(|log| map.shard_for_key(&keys::partition(*log)).map(|x| x.id) == Some(shard))
            .expect("a log on every shard")
    };
    let (log_s, log_t) = (log_on(s), log_on(t));
    let store = OxiaStore::connect(OxiaConfig {
        request_timeout: Duration::from_secs(2),
        ..OxiaConfig::new(cluster.addresses())
    })
    .await
    .expect("connect");
    append(&store, log_s).await.expect("append to S");
    append(&store, log_t).await.expect("append to T");

    cluster.kill9_server(b);
    let after_b = cluster.wait_for_leaders(Duration::from_secs(15)).await;
    assert_eq!((after_b[&s], after_b[&t]), (a, a), "losing a follower moves no leader");
    let killed_at = Instant::now();
    cluster.kill9_server(a);
    let deadline = killed_at + Duration::from_secs(20);
    let resumed = loop {
        match append(&store, log_s).await {
            Ok(_) => break killed_at.elapsed(),
            Err(MetaError::Unavailable(_) | MetaError::OutcomeUnknown(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!(
                "appends to shard {s} did not resume within 20 s of its leader's death: {error}\nmap {:?}",
                store.client().shard_map()
            ),
        }
    };
    println!("appends to shard {s} resumed {resumed:?} after server {a} was killed");
    // The cluster's own observer may still be reconnecting its assignment stream.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.shard_map().shard(t).is_some_and(|shard| shard.leader.is_empty()) {
        assert!(
            Instant::now() < deadline,
            "shard {t} has no quorum, so no leader: {:?}",
            cluster.shard_map()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = append(&store, log_t).await.expect_err("shard T has no leader");
    assert!(matches!(refused, MetaError::Unavailable(_)), "not applied, so retryable: {refused:?}");
}
