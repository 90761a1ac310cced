// The append/read suite, included by `append_read.rs` (in-memory stores) and
// `append_read_oxia.rs` (a real Oxia server and the S3 server), each of which defines
// `async fn stack() -> Stack`. Not a test target of its own (it lives in a subdirectory).

fn fast_config() -> WriterConfig {
    WriterConfig { flush_window: Duration::from_millis(2), ..WriterConfig::default() }
}

fn writer(meta: Arc<dyn MetaStore>, wal: Arc<dyn ObjectStore>, seed: u64) -> Writer {
    let deps = WriterDeps {
        meta,
        objects: wal,
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(seed)),
    };
    Writer::start(fast_config(), deps).unwrap()
}

fn reader(s: &Stack) -> Reader {
    let deps = ReaderDeps { meta: s.meta.clone(), wal: s.wal.clone(), compacted: s.compacted.clone() };
    Reader::new(ReaderConfig::default(), deps).unwrap()
}

fn log_ref(id: u64) -> LogRef {
    LogRef { log_id: LogId(id), namespace: "ns".into(), stream: "events".into() }
}

async fn read_all(reader: &Reader, log: &LogRef, from: u64) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let batch = reader.read(log, next, 1 << 20, Duration::ZERO).await.unwrap();
        if batch.entries.is_empty() {
            return out;
        }
        next = batch.next_offset;
        out.extend(batch.entries);
    }
}

// spec-rule: 05bf0372f3 [Writer] A writer MUST append entries by the following steps.
#[tokio::test]
async fn concurrent_writers_on_one_log_get_disjoint_contiguous_offsets() {
    // Goals: "concurrent appends receive disjoint, contiguous offset ranges in the store's
    // commit order" — two writers, no leader.
    let s = stack().await;
    let w1 = writer(s.meta.clone(), s.wal.clone(), 1);
    let w2 = writer(s.meta.clone(), s.wal.clone(), 2);
    let log = LogId(7);
    let mut tasks = Vec::new();
    for i in 0..60u32 {
        let w = if i % 2 == 0 { w1.clone() } else { w2.clone() };
        tasks.push(tokio::spawn(async move {
            let payload = Bytes::from(format!("entry-{i}"));
            let ack = w.append(log, payload.clone(), 1 + i % 3).await.unwrap();
            (ack, payload)
        }));
    }
    let mut acks = Vec::new();
    for t in tasks {
        acks.push(t.await.unwrap());
    }
    acks.sort_by_key(|(a, _)| a.offset);
    let mut expect = 0;
    for (ack, _) in &acks {
        assert_eq!(ack.offset, expect, "offsets must be contiguous and disjoint");
        expect = ack.end_offset();
    }
    // Read back: byte-identical entries at the acknowledged offsets with their timestamps.
    let r = reader(&s);
    let got = read_all(&r, &log_ref(7), 0).await;
    assert_eq!(got.len(), acks.len());
    for (entry, (ack, payload)) in got.iter().zip(&acks) {
        assert_eq!(
            (entry.offset, entry.record_count, entry.timestamp_ms),
            (ack.offset, ack.record_count, ack.timestamp_ms)
        );
        assert_eq!(&entry.payload, payload);
    }
    assert_eq!(r.next_offset(log).await.unwrap(), expect);
    w1.close().await;
    w2.close().await;
    // Closing released the leases.
    assert!(lease::list_leases(s.meta.as_ref(), log).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_wal_object_holds_at_most_the_configured_number_of_logs() {
    let s = stack().await;
    let deps = WriterDeps {
        meta: s.meta.clone(),
        objects: s.wal.clone(),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(3)),
    };
    let config =
        WriterConfig { flush_window: Duration::from_millis(50), max_logs_per_object: 2, ..fast_config() };
    let w = Writer::start(config, deps).unwrap();
    let acks =
        futures::future::join_all((0..6u64).map(|l| w.append(LogId(l), Bytes::from_static(b"x"), 1))).await;
    assert!(acks.iter().all(Result::is_ok));
    let objects: Vec<_> = futures::StreamExt::collect::<Vec<_>>(
        s.wal.list(&lakestream_objstore::ObjectPrefix::new("").unwrap(), None),
    )
    .await;
    assert!(objects.len() >= 3, "6 logs at 2 per object need at least 3 objects, got {}", objects.len());
    for o in objects {
        let bytes = s.wal.get(&o.unwrap().path).await.unwrap();
        let object = lakestream_format::wal::WalObject::parse(bytes).unwrap();
        assert!(object.index().sections().len() <= 2);
    }
    w.close().await;
}

// spec-rule: 05bf0372f3 [Writer] A writer MUST append entries by the following steps.
// spec-rule: 2d6413a9e8 [Writer] A writer MUST NOT publish an index record for a WAL object before the obj…
// spec-rule: 8417d8eea0 [Writer] If writing the object fails, the writer MUST NOT publish an index record…
#[tokio::test]
async fn failed_object_write_publishes_no_index_record() {
    // [Writer] If writing the object fails, the writer MUST NOT publish an index record for
    // it, and MUST NOT report any of its entries as appended.
    let s = stack().await;
    let faults = FaultConfig::new(9)
        .with(Operation::Put, OperationFaults { error_probability: 1.0, ..Default::default() });
    let faulty: Arc<dyn ObjectStore> = Arc::new(FaultyStore::new(s.wal.clone(), faults));
    let w = writer(s.meta.clone(), faulty, 4);
    let err = w.append(LogId(3), Bytes::from_static(b"lost"), 1).await.unwrap_err();
    assert!(matches!(err, AppendError::ObjectWriteFailed(_)), "{err}");
    let records =
        s.meta.scan("3", &keys::first_key(LogId(3)), &keys::last_key(LogId(3)), None).await.unwrap();
    assert!(records.is_empty(), "no index record may exist: {records:?}");
    w.close().await;
}

#[tokio::test]
async fn an_index_put_with_unknown_outcome_is_reported_as_unknown_not_failed() {
    // Appending: "A sequenced put whose outcome is unknown … can have committed."
    let s = stack().await;
    let lossy = HookedStore::new(s.meta.clone());
    lossy.on(Op::SequencedPut).lose_answer();
    let w = writer(lossy.clone(), s.wal.clone(), 5);
    let err = w.append(LogId(4), Bytes::from_static(b"maybe"), 2).await.unwrap_err();
    assert!(matches!(err, AppendError::OutcomeUnknown { .. }), "{err}");
    assert_eq!(err.class(), lakestream_format::ErrorClass::OutcomeUnknown);
    // Here the put did commit: the entry is readable, which "unknown" allows.
    let got = read_all(&reader(&s), &log_ref(4), 0).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, Bytes::from_static(b"maybe"));
    w.close().await;
}

// spec-rule: 05bf0372f3 [Writer] A writer MUST append entries by the following steps.
// spec-rule: bc3a241078 [Writer, Compactor] If the fence exists, or the Get fails, the implementation MUST…
#[tokio::test]
async fn a_fenced_log_refuses_appends() {
    // [Writer] If the fence exists … MUST delete its lease record and MUST NOT change the log.
    let s = stack().await;
    lease::fence(s.meta.as_ref(), LogId(5)).await.unwrap();
    let w = writer(s.meta.clone(), s.wal.clone(), 6);
    let err = w.append(LogId(5), Bytes::from_static(b"no"), 1).await.unwrap_err();
    assert_eq!(err, AppendError::Fenced { log_id: LogId(5) });
    assert!(lease::list_leases(s.meta.as_ref(), LogId(5)).await.unwrap().is_empty());
    w.close().await;
}

#[tokio::test]
async fn an_idle_lease_is_released_so_deleting_the_log_need_not_wait_for_the_writer() {
    // Catalog: deleting L waits until no lease record of L remains. A live writer releases a
    // lease it has not used for `lease_idle_release`, and takes a new one on the next append.
    let s = stack().await;
    let config = WriterConfig { lease_idle_release: Duration::from_millis(50), ..fast_config() };
    let deps = WriterDeps {
        meta: s.meta.clone(),
        objects: s.wal.clone(),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(30)),
    };
    let w = Writer::start(config, deps).unwrap();
    w.append(LogId(30), Bytes::from_static(b"a"), 1).await.unwrap();
    w.append(LogId(31), Bytes::from_static(b"b"), 1).await.unwrap();
    assert_eq!(w.leased_logs().await, vec![LogId(30), LogId(31)]);
    // The drain of a fenced log ends while the writer is still running.
    lease::fence(s.meta.as_ref(), LogId(30)).await.unwrap();
    let drain =
        lease::DrainConfig { timeout: Duration::from_secs(10), poll_interval: Duration::from_millis(5) };
    let outcome = lease::drain(s.meta.as_ref(), LogId(30), &drain).await.unwrap();
    assert_eq!(outcome, lease::DrainOutcome::Drained);
    assert!(!w.leased_logs().await.contains(&LogId(30)));
    // After the fence the log refuses appends; the other log takes a new lease and goes on.
    let err = w.append(LogId(30), Bytes::from_static(b"late"), 1).await.unwrap_err();
    assert_eq!(err, AppendError::Fenced { log_id: LogId(30) });
    let ack = w.append(LogId(31), Bytes::from_static(b"c"), 1).await.unwrap();
    assert_eq!(ack.offset, 1);
    assert_eq!(lease::list_leases(s.meta.as_ref(), LogId(31)).await.unwrap().len(), 1);
    w.close().await;
}

// spec-rule: d186fe1fb1 [Reader] A reader MUST read B from the trim marker of L, taking B as 0 when the ma…
// spec-rule: ed74c3e86b [Reader] A reader MUST NOT return an entry that ends at or below B.
// spec-rule: f217c6f581 [Reader] A reader SHOULD report the greater of that record's start offset and B as…
// spec-rule: 402d4f8579 [All] An implementation MUST NOT decrease B.
// spec-rule: c7bc99327d [Writer] A soft trim through offset o, inclusive, MUST compute B′ as the smaller o…
#[tokio::test]
async fn soft_trim_caps_at_the_last_record_and_reads_skip_below_b() {
    let s = stack().await;
    let w = writer(s.meta.clone(), s.wal.clone(), 8);
    let log = LogId(9);
    for i in 0..5u32 {
        w.append(log, Bytes::from(vec![i as u8; 3]), 2).await.unwrap(); // entries at 0,2,4,6,8
    }
    // Trim through 3: B' = min(4, start of last record = 8) = 4.
    let t = w.soft_trim(log, 3).await.unwrap();
    assert_eq!((t.marker, t.advanced), (4, true));
    // Trim far past the end: capped at the start of the last record (8), keeping it in place.
    let t = w.soft_trim(log, 100).await.unwrap();
    assert_eq!((t.marker, t.advanced), (8, true));
    // An older trim never decreases B, and reports the stored marker.
    let t = w.soft_trim(log, 1).await.unwrap();
    assert_eq!((t.marker, t.advanced), (8, false));
    let r = reader(&s);
    assert_eq!(r.trim_marker(log).await.unwrap(), 8);
    assert_eq!(r.first_offset(log).await.unwrap(), 8);
    // [Reader] MUST NOT return an entry that ends at or below B; reading from 0 starts at B.
    let got = read_all(&r, &log_ref(9), 0).await;
    assert_eq!(got.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![8]);
    // The next append continues from the greatest key.
    assert_eq!(w.append(log, Bytes::from_static(b"z"), 1).await.unwrap().offset, 10);
    w.close().await;
}

// spec-rule: c7bc99327d [Writer] A soft trim through offset o, inclusive, MUST compute B′ as the smaller o…
#[tokio::test]
async fn soft_trim_of_a_log_without_records_changes_nothing() {
    let s = stack().await;
    let w = writer(s.meta.clone(), s.wal.clone(), 10);
    let t = w.soft_trim(LogId(11), 5).await.unwrap();
    assert_eq!((t.marker, t.advanced), (0, false));
    assert!(s.meta.get("11", &keys::trim_marker_key(LogId(11))).await.unwrap().is_none());
    w.close().await;
}

// spec-rule: ed74c3e86b [Reader] A reader MUST NOT return an entry that ends at or below B.
// spec-rule: f217c6f581 [Reader] A reader SHOULD report the greater of that record's start offset and B as…
#[tokio::test]
async fn the_first_offset_is_b_when_b_falls_inside_a_record() {
    // [Reader] A reader SHOULD report the greater of the start offset of the first record
    // above the trim marker, Higher(K(L, B, MAX)), and B as the log's first offset (R2), and
    // MUST NOT return an entry that ends at or below B (R4). Here B lies inside a record and
    // not at its start: once inside a single entry, once between entries of one record.
    let s = stack().await;
    let r = reader(&s);
    // Log 24: one entry of 3 records, [0, 3), then [3, 4). B = 1 lies inside that entry.
    let w = writer(s.meta.clone(), s.wal.clone(), 24);
    w.append(LogId(24), Bytes::from_static(b"three"), 3).await.unwrap();
    w.append(LogId(24), Bytes::from_static(b"last"), 1).await.unwrap();
    assert_eq!(w.soft_trim(LogId(24), 0).await.unwrap().marker, 1);
    assert_eq!(r.first_offset(LogId(24)).await.unwrap(), 1, "B, not the record's start 0");
    let got = read_all(&r, &log_ref(24), 0).await;
    assert_eq!(got.iter().map(|e| (e.offset, e.record_count)).collect::<Vec<_>>(), vec![(0, 3), (3, 1)]);
    // Log 25: entries [0, 1) [1, 2) [2, 3) in one record (one batch of 3 bytes), then [3, 4).
    let deps = WriterDeps {
        meta: s.meta.clone(),
        objects: s.wal.clone(),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(25)),
    };
    let batched = WriterConfig {
        flush_window: Duration::from_secs(3600),
        flush_when_idle: false,
        flush_bytes: 3,
        ..fast_config()
    };
    let one_batch = Writer::start(batched, deps).unwrap();
    let appends = [b"a", b"b", b"c"].map(|p| one_batch.append(LogId(25), Bytes::from_static(p), 1));
    for ack in futures::future::join_all(appends).await {
        ack.unwrap();
    }
    one_batch.close().await;
    w.append(LogId(25), Bytes::from_static(b"d"), 1).await.unwrap();
    let records =
        s.meta.scan("25", &keys::first_key(LogId(25)), &keys::last_key(LogId(25)), None).await.unwrap();
    let ends: Vec<u64> = records.iter().map(|r| IndexKey::parse(&r.key).unwrap().end_offset).collect();
    assert_eq!(ends, vec![3, 4], "the layout this test needs: [0, 3) in one record");
    assert_eq!(w.soft_trim(LogId(25), 1).await.unwrap().marker, 2);
    assert_eq!(r.first_offset(LogId(25)).await.unwrap(), 2);
    let got = read_all(&r, &log_ref(25), 0).await;
    assert_eq!(
        got.iter().map(|e| e.offset).collect::<Vec<_>>(),
        vec![2, 3],
        "entries ending at or below B are skipped"
    );
    w.close().await;
}

// spec-rule: 49fb846f28 [Reader] A reader MUST read the entries at o′ from the index record of L with the…
#[tokio::test]
async fn a_read_inside_an_entry_returns_the_whole_entry() {
    // R4: the first entry returned is the entry that holds o′, and it can start before o′.
    let s = stack().await;
    let w = writer(s.meta.clone(), s.wal.clone(), 11);
    w.append(LogId(12), Bytes::from_static(b"first"), 4).await.unwrap();
    w.append(LogId(12), Bytes::from_static(b"second"), 4).await.unwrap();
    let batch = reader(&s).read(&log_ref(12), 5, 1, Duration::ZERO).await.unwrap();
    assert_eq!(batch.entries.len(), 1);
    assert_eq!((batch.entries[0].offset, batch.next_offset), (4, 8));
    w.close().await;
}

#[tokio::test]
async fn a_tail_read_waits_for_new_data() {
    let s = stack().await;
    let w = writer(s.meta.clone(), s.wal.clone(), 12);
    let r = reader(&s);
    let tail = {
        let r = r.clone();
        tokio::spawn(async move { r.read(&log_ref(13), 0, 1024, Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    w.append(LogId(13), Bytes::from_static(b"late"), 1).await.unwrap();
    r.notify_appended();
    let batch = tail.await.unwrap().unwrap();
    assert_eq!(batch.entries[0].payload, Bytes::from_static(b"late"));
    // And a read at the end with no wait returns at once, empty.
    let empty = r.read(&log_ref(13), 1, 1024, Duration::ZERO).await.unwrap();
    assert!(empty.entries.is_empty() && empty.next_offset == 1);
    w.close().await;
}

/// A test helper following C1–C4: compacts every record of `log` into two Parquet files with
/// companions, installs the PARQUET record under the last record's key and retires the rest.
/// Returns the WAL objects the replaced records named.
async fn compact_whole_log(s: &Stack, r: &Reader, log: &LogRef) -> Vec<String> {
    let l = log.log_id;
    let p = keys::partition(l);
    let records = s.meta.scan(&p, &keys::first_key(l), &keys::last_key(l), None).await.unwrap();
    let wal_names: Vec<String> = records
        .iter()
        .map(|r| match lakestream_format::entry_index::decode(&r.value).unwrap() {
            lakestream_format::entry_index::IndexValue::Raw(raw) => raw.location,
            other => panic!("C1: every record in the range must be RAW, got {other:?}"),
        })
        .collect();
    let last = IndexKey::parse(&records.last().unwrap().key).unwrap();
    let entries = read_all(r, log, 0).await; // C2 reads the range's entries
    let split = entries.len() / 2;
    let mut files = Vec::new();
    let mut cumulative = 0u64;
    for (i, part) in [&entries[..split], &entries[split..]].into_iter().enumerate() {
        let name = format!("test-{}-{i}.parquet", l.0);
        let data = compacted::write_compacted_file(
            KNOWN_BINDINGS[0],
            &name,
            part.iter().map(|e| e.payload.clone()),
            Default::default(),
        )
        .unwrap();
        let rows: Vec<CompanionRow> = part
            .iter()
            .map(|e| {
                cumulative += e.payload.len() as u64;
                CompanionRow {
                    offset: e.offset,
                    record_count: e.record_count,
                    timestamp_ms: e.timestamp_ms,
                    entry_size: e.payload.len() as u32,
                    cumulative_size: cumulative,
                    schema_version: None,
                }
            })
            .collect();
        let index = companion::write_companion(&rows, Default::default()).unwrap();
        let dir = format!("{}/{}", log.namespace, log.stream);
        s.compacted.put(&ObjectPath::new(format!("{dir}/{name}")).unwrap(), Bytes::from(data)).await.unwrap();
        let companion_name = compacted::companion_name(&name).unwrap();
        s.compacted
            .put(&ObjectPath::new(format!("{dir}/{companion_name}")).unwrap(), Bytes::from(index))
            .await
            .unwrap();
        files.push(FileIndexEntry { last_offset: part.last().unwrap().end_offset() - 1, name });
    }
    let range = ParquetRange {
        start: 0,
        end: last.end_offset,
        cumulative_start: 0,
        cumulative_end: last.cumulative_size,
    };
    let value = EntryIndex::parquet(range, &FileIndex::new(files).unwrap()).unwrap().encode();
    // C3: Get, then Put keeping the key. C4: DeleteRange(K(L,s+1,0), K(L,e-1,MAX)).
    let key = last.encode();
    assert!(s.meta.get(&p, &key).await.unwrap().is_some());
    s.meta.put(&p, &key, Bytes::from(value), PutCondition::None).await.unwrap();
    s.meta
        .delete_range(&p, &keys::index_key(l, 1, 0), &keys::index_key(l, last.end_offset - 1, keys::MAX))
        .await
        .unwrap();
    wal_names
}

// spec-rule: 1b2f6a683f [Reader] A reader MUST resolve the file names in a file index against the director…
// spec-rule: fc936ba355 [Reader] A reader MUST read a RAW record's entries from its WAL object, and a PARQ…
// spec-rule: 41cc9e9a8e [Reader] A reader MUST read a PARQUET record's entries by these steps.
#[tokio::test]
async fn reads_cross_raw_and_parquet_records_with_the_same_bytes_and_timestamps() {
    let s = stack().await;
    let w = writer(s.meta.clone(), s.wal.clone(), 13);
    let log = log_ref(14);
    for i in 0..8u32 {
        w.append(log.log_id, Bytes::from(format!("before-{i}")), 1 + i % 2).await.unwrap();
    }
    let r = reader(&s);
    let before = read_all(&r, &log, 0).await;
    compact_whole_log(&s, &r, &log).await;
    for i in 0..3u32 {
        w.append(log.log_id, Bytes::from(format!("after-{i}")), 1).await.unwrap();
    }
    let fresh = reader(&s); // no cached objects
    let all = read_all(&fresh, &log, 0).await;
    assert_eq!(&all[..before.len()], &before[..], "compaction preserves entries, offsets and timestamps");
    assert_eq!(all.len(), before.len() + 3);
    // A read that starts inside a compacted entry finds that entry's row (numeric floor).
    let mid = before[3].offset + u64::from(before[3].record_count) - 1;
    let batch = fresh.read(&log, mid, 1, Duration::ZERO).await.unwrap();
    assert_eq!(batch.entries[0], before[3]);
    w.close().await;
}

// spec-rule: 050da406ea [Reader] When the object that a record names does not exist, a reader SHOULD look…
#[tokio::test]
async fn a_missing_object_makes_the_reader_look_the_record_up_again() {
    // [Reader] When the object that a record names does not exist, a reader SHOULD look up
    // the covering record again before it reports an error.
    let s = stack().await;
    let w = writer(s.meta.clone(), s.wal.clone(), 14);
    let log = log_ref(15);
    for i in 0..4u32 {
        w.append(log.log_id, Bytes::from(format!("e{i}")), 1).await.unwrap();
    }
    let p = keys::partition(log.log_id);
    let stale =
        s.meta.scan(&p, &keys::first_key(log.log_id), &keys::last_key(log.log_id), None).await.unwrap();
    let r = reader(&s);
    let wal_names = compact_whole_log(&s, &r, &log).await;
    for name in wal_names {
        s.wal.delete(&ObjectPath::new(name).unwrap()).await.unwrap(); // reclaimed
    }
    let meta = HookedStore::new(s.meta.clone());
    meta.on(Op::Scan).once().answer(Answer::Records(stale));
    let deps = ReaderDeps { meta, wal: s.wal.clone(), compacted: s.compacted.clone() };
    let cold = Reader::new(ReaderConfig::default(), deps).unwrap();
    let got = read_all(&cold, &log, 0).await;
    assert_eq!(got.len(), 4);
    // Without a record to fall back on, the error names the missing object.
    let deps = ReaderDeps {
        meta: s.meta.clone(),
        wal: Arc::new(MemObjects::new(Arc::new(SystemClock))),
        compacted: Arc::new(MemObjects::new(Arc::new(SystemClock))),
    };
    let broken = Reader::new(ReaderConfig::default(), deps).unwrap();
    let err = broken.read(&log, 0, 1024, Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, ReadError::MissingObject { .. }), "{err}");
    w.close().await;
}

#[tokio::test]
async fn fail_fast_backpressure_refuses_instead_of_growing_memory() {
    let s = stack().await;
    let faults = FaultConfig::new(1)
        .with(Operation::Put, OperationFaults { delay: Duration::from_millis(300), ..Default::default() });
    let slow: Arc<dyn ObjectStore> = Arc::new(FaultyStore::new(s.wal.clone(), faults));
    let deps = WriterDeps {
        meta: s.meta.clone(),
        objects: slow,
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(15)),
    };
    let config = WriterConfig {
        max_in_flight_bytes: 1024,
        max_entry_bytes: 1024,
        backpressure: lakestream_writer::Backpressure::FailFast,
        ..fast_config()
    };
    let w = Writer::start(config, deps).unwrap();
    let first = {
        let w = w.clone();
        tokio::spawn(async move { w.append(LogId(16), Bytes::from(vec![0; 1000]), 1).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let err = w.append(LogId(16), Bytes::from(vec![0; 100]), 1).await.unwrap_err();
    assert_eq!(err, AppendError::Backpressure);
    assert!(first.await.unwrap().is_ok());
    w.close().await;
}

// spec-rule: 49fb846f28 [Reader] A reader MUST read the entries at o′ from the index record of L with the…
#[tokio::test]
async fn the_index_cache_never_hides_new_records_or_a_covering_record() {
    let s = stack().await;
    let w = writer(s.meta.clone(), s.wal.clone(), 16);
    let log = log_ref(17);
    let r = reader(&s); // index cache on (default TTL)
    for i in 0..3u32 {
        w.append(log.log_id, Bytes::from(format!("a{i}")), 1).await.unwrap();
    }
    // Cache records from offset 2 on, then read from 0: the record covering 0 is not cached.
    assert_eq!(r.read(&log, 2, 1024, Duration::ZERO).await.unwrap().entries.len(), 1);
    assert_eq!(read_all(&r, &log, 0).await.len(), 3);
    // New records are seen at once although older ones are cached.
    w.append(log.log_id, Bytes::from_static(b"new"), 1).await.unwrap();
    let got = read_all(&r, &log, 0).await;
    assert_eq!(got.len(), 4);
    assert_eq!(got[3].payload, Bytes::from_static(b"new"));
    w.close().await;
}

#[tokio::test]
async fn ranged_wal_reads_return_what_whole_object_reads_return() {
    let s = stack().await;
    let deps = WriterDeps {
        meta: s.meta.clone(),
        objects: s.wal.clone(),
        clock: Arc::new(SystemClock),
        tokens: Arc::new(SeededTokens::new(17)),
    };
    // A long window puts every entry of both logs in one object whose index region (about 3
    // bytes per entry) is larger than the ranged reader's 4 KiB first guess.
    let config = WriterConfig {
        flush_window: Duration::from_millis(300),
        flush_when_idle: false,
        ..WriterConfig::default()
    };
    let w = Writer::start(config, deps).unwrap();
    let appends = (0..1600u32).map(|i| {
        let w = w.clone();
        async move { w.append(LogId(18 + u64::from(i % 2)), Bytes::from(format!("p{i}")), 1 + i % 2).await }
    });
    for r in futures::future::join_all(appends).await {
        r.unwrap();
    }
    let whole = reader(&s);
    let deps = ReaderDeps { meta: s.meta.clone(), wal: s.wal.clone(), compacted: s.compacted.clone() };
    let ranged = Reader::new(
        ReaderConfig { wal_read: lakestream_reader::WalReadMode::Ranged, ..ReaderConfig::default() },
        deps,
    )
    .unwrap();
    for log in [log_ref(18), log_ref(19)] {
        let a = read_all(&whole, &log, 0).await;
        let b = read_all(&ranged, &log, 0).await;
        assert_eq!(a.len(), 800);
        assert_eq!(a, b);
    }
    w.close().await;
}

// spec-rule: 6c2c744c42 [Writer] Every entry MUST hold at least one record.
// spec-rule: e7ec250a7b [Writer] The entries of a log section MUST be listed in the order of their offsets.
#[tokio::test]
async fn append_many_keeps_the_order_of_a_request() {
    let s = stack().await;
    let w = writer(s.meta.clone(), s.wal.clone(), 20);
    let entries: Vec<(Bytes, u32)> = (0..50u32).map(|i| (Bytes::from(format!("e{i}")), 1 + i % 3)).collect();
    let results = w.append_many(LogId(21), entries.clone()).await;
    let mut expected_offset = 0;
    for (r, (_, count)) in results.iter().zip(&entries) {
        let ack = r.as_ref().unwrap();
        assert_eq!(ack.offset, expected_offset, "entries take offsets in request order");
        expected_offset += u64::from(*count);
    }
    let got = read_all(&reader(&s), &log_ref(21), 0).await;
    let payloads: Vec<_> = got.iter().map(|e| e.payload.clone()).collect();
    assert_eq!(payloads, entries.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>());
    // The request committed as one unit: one index record for its 50 entries.
    let records = s.meta.list("21", &keys::first_key(LogId(21)), &keys::last_key(LogId(21))).await.unwrap();
    assert_eq!(records.len(), 1, "one sequenced put for the whole request: {records:?}");
    // A bad entry fails the whole request, and nothing of it is written.
    let mixed =
        w.append_many(LogId(21), vec![(Bytes::from_static(b"ok"), 1), (Bytes::from_static(b"bad"), 0)]).await;
    assert!(mixed.iter().all(|r| matches!(r, Err(AppendError::InvalidInput(_)))), "{mixed:?}");
    assert_eq!(read_all(&reader(&s), &log_ref(21), 0).await.len(), 50, "nothing of the bad request written");
    w.close().await;
}

/// A request's entries commit all or none: when the object holding them cannot be written,
/// every entry of the request fails, none is readable, and the next request continues at the
/// same offset.
#[tokio::test]
async fn append_many_commits_all_or_none() {
    let s = stack().await;
    let put_faults = OperationFaults { error_probability: 1.0, ..OperationFaults::default() };
    let failing: Arc<dyn ObjectStore> =
        Arc::new(FaultyStore::new(s.wal.clone(), FaultConfig::new(3).with(Operation::Put, put_faults)));
    let w = writer(s.meta.clone(), failing, 24);
    let entries: Vec<(Bytes, u32)> = (0..5u32).map(|i| (Bytes::from(format!("lost{i}")), 1)).collect();
    let failed = w.append_many(LogId(25), entries).await;
    assert!(failed.iter().all(|r| matches!(r, Err(AppendError::ObjectWriteFailed(_)))), "{failed:?}");
    w.close().await;
    assert!(read_all(&reader(&s), &log_ref(25), 0).await.is_empty());
    let w = writer(s.meta.clone(), s.wal.clone(), 26);
    let entries: Vec<(Bytes, u32)> = (0..5u32).map(|i| (Bytes::from(format!("kept{i}")), 2)).collect();
    let acked = w.append_many(LogId(25), entries).await;
    let offsets: Vec<u64> = acked.iter().map(|r| r.as_ref().unwrap().offset).collect();
    assert_eq!(offsets, [0, 2, 4, 6, 8], "contiguous offsets from where the log stood");
    w.close().await;
}

// spec-rule: d186fe1fb1 [Reader] A reader MUST read B from the trim marker of L, taking B as 0 when the ma…
#[tokio::test]
async fn a_read_with_a_stale_trim_marker_retries_from_the_new_one() {
    let s = stack().await;
    let w = writer(s.meta.clone(), s.wal.clone(), 22);
    let log = log_ref(23);
    for i in 0..6u32 {
        w.append(log.log_id, Bytes::from(format!("x{i}")), 1).await.unwrap();
    }
    let stale = s.meta.get("23", &keys::trim_marker_key(log.log_id)).await.unwrap();
    assert!(stale.is_none());
    w.soft_trim(log.log_id, 3).await.unwrap(); // B = 4
    // Lose the entries below B, as a compaction that leaves them out would: delete their
    // WAL objects' records (hard trim to 4) and the objects' bytes are never read again.
    s.meta
        .delete_range("23", &keys::first_key(log.log_id), &keys::covering_lookup_key(log.log_id, 4))
        .await
        .unwrap();
    let stale_marker = Record {
        key: keys::trim_marker_key(log.log_id),
        value: Bytes::from_static(b"0"),
        version: 0,
        created_ms: 0,
        modified_ms: 0,
    };
    let meta = HookedStore::new(s.meta.clone());
    meta.on(Op::Get).key_prefix("/mark-deleted-offsets/").once().answer(Answer::Record(Some(stale_marker)));
    let r = Reader::new(
        ReaderConfig::default(),
        ReaderDeps { meta, wal: s.wal.clone(), compacted: s.compacted.clone() },
    )
    .unwrap();
    let batch = r.read(&log, 0, 1 << 20, Duration::ZERO).await.unwrap();
    assert_eq!(batch.entries.first().map(|e| e.offset), Some(4));
    assert_eq!(batch.trim_marker, 4);
    w.close().await;
}
