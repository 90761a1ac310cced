//! The append and read suite of `append_read.rs` on the production stack: each test on a fresh
//! real Oxia server (`oxia standalone --shards 4` from `LAKESTREAM_TEST_OXIA_BIN`) and WAL and
//! compacted roots on the S3 server (`LAKESTREAM_TEST_S3_*`), both set by `scripts/test`. The
//! faults the suite injects wrap these real stores.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lakestream_format::compacted::{self, KNOWN_BINDINGS};
use lakestream_format::companion::{self, CompanionRow};
use lakestream_format::entry_index::{EntryIndex, ParquetRange};
use lakestream_format::file_index::{FileIndex, FileIndexEntry};
use lakestream_format::keys::{self, IndexKey};
use lakestream_format::{Entry, LogId, LogRef, SystemClock};
use lakestream_meta::hooked::{Answer, HookedStore, Op};
use lakestream_meta::lease::{self, SeededTokens};
use lakestream_meta::{MetaStore, PutCondition, Record};
use lakestream_objstore::{
    FaultConfig, FaultyStore, InMemoryStore as MemObjects, ObjectPath, ObjectStore, Operation,
    OperationFaults,
};
use lakestream_reader::{ReadError, Reader, ReaderConfig, ReaderDeps};
use lakestream_writer::{AppendError, Writer, WriterConfig, WriterDeps};

struct Stack {
    meta: Arc<dyn MetaStore>,
    wal: Arc<dyn ObjectStore>,
    compacted: Arc<dyn ObjectStore>,
    /// The test's own Oxia server, killed when the test ends.
    _oxia: lakestream_meta_oxia::testkit::StandaloneOxia,
}

/// A root on the test S3 server (`LAKESTREAM_TEST_S3_*`), under a prefix of the run's own.
fn s3_root(prefix: String) -> Arc<dyn ObjectStore> {
    Arc::new(lakestream_objstore_s3::testkit::server_store(prefix))
}

async fn stack() -> Stack {
    use lakestream_format::Clock;
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let oxia = lakestream_meta_oxia::testkit::StandaloneOxia::start(4, &[]).await;
    let run = format!(
        "append-read-{}-{}-{}",
        SystemClock.now_ms(),
        std::process::id(),
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    Stack {
        meta: Arc::new(oxia.store().await),
        wal: s3_root(format!("{run}/wal")),
        compacted: s3_root(format!("{run}/compacted")),
        _oxia: oxia,
    }
}

include!("suite/append_read.rs");
