//! The append and read paths together, over the in-memory metadata and object stores:
//! the spec's Appending (A1–A4), Reading (R1–R4) and Soft trim rules, with faults injected.
//! The same suite runs on a real Oxia server and the S3 server in `append_read_oxia.rs`.

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
use lakestream_meta::{InMemoryStore, MetaStore, PutCondition, Record};
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
}

async fn stack() -> Stack {
    Stack {
        meta: Arc::new(InMemoryStore::new()),
        wal: Arc::new(MemObjects::new(Arc::new(SystemClock))),
        compacted: Arc::new(MemObjects::new(Arc::new(SystemClock))),
    }
}

include!("suite/append_read.rs");
