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

const HOW_TO_START_S3: &str = "this suite needs the S3 server: run `scripts/test`, or start s3s-fs with \
     `source scripts/servers.sh && start_s3 $(mktemp -d)` and run cargo test in that shell";

fn s3_root(prefix: String) -> Arc<dyn ObjectStore> {
    use lakestream_objstore_s3::{ConditionalPut, S3Config, S3Store};
    let var =
        |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set; {HOW_TO_START_S3}"));
    let config = S3Config {
        bucket: var("LAKESTREAM_TEST_S3_BUCKET"),
        prefix: Some(prefix),
        endpoint: Some(var("LAKESTREAM_TEST_S3_ENDPOINT")),
        region: var("LAKESTREAM_TEST_S3_REGION"),
        access_key_id: Some(var("LAKESTREAM_TEST_S3_ACCESS_KEY")),
        secret_access_key: Some(var("LAKESTREAM_TEST_S3_SECRET_KEY")),
        force_path_style: true,
        // s3s-fs checks If-None-Match before writing, not atomically.
        conditional_put: ConditionalPut::Sequential,
        retry_seed: Some(13),
        ..S3Config::default()
    };
    Arc::new(S3Store::new(config).expect("a valid S3 configuration"))
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
