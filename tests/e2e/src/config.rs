//! The TOML configuration a spawned service reads. Generated, not templated from `deploy/`,
//! so each suite states the pace it needs (compaction every few hundred milliseconds for the
//! crash suite, bounded caches for the load suite) and every run gets its own S3 prefix.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::env::{AzureEnv, S3Env};

/// Which roles a process serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    /// Appends and trims.
    pub writer: bool,
    /// Fetches and offsets.
    pub reader: bool,
    /// Namespaces and streams.
    pub catalog: bool,
    /// Background compaction and reclamation.
    pub compactor: bool,
}

impl Roles {
    /// Every role in one process.
    pub const ALL: Roles = Roles { writer: true, reader: true, catalog: true, compactor: true };
    /// The writer service of the separate topology (with the catalog, as `deploy/writer.toml`).
    pub const WRITER: Roles = Roles { writer: true, reader: false, catalog: true, compactor: false };
    /// The reader service (with the catalog, as `deploy/reader.toml`).
    pub const READER: Roles = Roles { writer: false, reader: true, catalog: true, compactor: false };
    /// A catalog service alone (namespaces and streams).
    pub const CATALOG: Roles = Roles { writer: false, reader: false, catalog: true, compactor: false };
    /// The compactor service.
    pub const COMPACTOR: Roles = Roles { writer: false, reader: false, catalog: false, compactor: true };
}

/// The metadata store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Metadata {
    /// The embedded store in this file: one process only.
    Embedded(PathBuf),
    /// An Oxia server or cluster, shared by several processes.
    Oxia {
        /// `host:port` of each server the client may bootstrap from.
        addresses: Vec<String>,
        /// The Oxia namespace.
        namespace: String,
    },
}

/// How eagerly the compactor works and how much it may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// A range closes at this much payload.
    pub max_range_bytes: u64,
    /// … or when its oldest entry is this old.
    pub max_range_age: Duration,
    /// A compacted file closes at this much payload (one file is built in memory).
    pub max_file_bytes: u64,
    /// Time between compaction passes.
    pub interval: Duration,
    /// Time between reclamation passes.
    pub gc_interval: Duration,
    /// How long WAL objects are kept after no record names them.
    pub wal_grace: Duration,
}

impl Compaction {
    /// Compaction all the time: small ranges closed after half a second, passes every 200 ms,
    /// WAL objects reclaimed after 4 s (passes every 3 s). Kill points then often fall inside
    /// a compaction or a reclamation.
    pub fn frantic() -> Self {
        Compaction {
            max_range_bytes: 48 << 10,
            max_range_age: Duration::from_millis(500),
            max_file_bytes: 32 << 10,
            interval: Duration::from_millis(200),
            gc_interval: Duration::from_secs(3),
            wal_grace: Duration::from_secs(4),
        }
    }

    /// A steady pace for sustained load: 16 MiB ranges or 5 s, WAL reclaimed after 30 s.
    pub fn steady() -> Self {
        Compaction {
            max_range_bytes: 16 << 20,
            // Early enough that the first pass (which fills the compactor's cache and row
            // groups, a one-time step of ~150 MiB of RSS) falls in the load suite's first
            // window: the suite compares steady states, first window against last.
            max_range_age: Duration::from_secs(5),
            max_file_bytes: 16 << 20,
            interval: Duration::from_secs(2),
            gc_interval: Duration::from_secs(15),
            wal_grace: Duration::from_secs(30),
        }
    }
}

/// Everything a generated configuration file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    /// The HTTP port on 127.0.0.1.
    pub http_port: u16,
    /// The roles.
    pub roles: Roles,
    /// The metadata store.
    pub metadata: Metadata,
    /// The S3 server.
    pub s3: S3Env,
    /// The endpoint the service uses for S3 (a fault proxy's, or the server's own).
    pub s3_endpoint: String,
    /// The run's key prefix in the bucket; WAL and compacted roots live below it.
    pub prefix: String,
    /// Compaction pace.
    pub compaction: Compaction,
    /// The writer's flush window.
    pub flush_window: Duration,
    /// The writer's session timeout (leases of a killed writer on Oxia vanish after it).
    pub writer_session_timeout: Duration,
    /// Bytes of each of the reader's two object caches.
    pub reader_cache_bytes: u64,
    /// The read-ahead budget of the reader and of the compactor's reader (part of the memory
    /// the load suite allows: bounded, but not there in the first seconds).
    pub read_ahead_bytes: u64,
    /// Attempts per S3 request (retries hide dropped connections).
    pub s3_max_attempts: u32,
    /// Store into Azure Blob storage (roots given as `az://` URLs) instead of S3.
    pub azure: Option<AzureEnv>,
}

impl ServiceConfig {
    /// All roles on the embedded store at `metadata`, storing into `s3` under `prefix`.
    pub fn all_in_one(http_port: u16, metadata: PathBuf, s3: S3Env, prefix: &str) -> Self {
        ServiceConfig {
            http_port,
            roles: Roles::ALL,
            metadata: Metadata::Embedded(metadata),
            s3_endpoint: s3.endpoint.clone(),
            s3,
            prefix: prefix.to_string(),
            compaction: Compaction::frantic(),
            flush_window: Duration::from_millis(10),
            writer_session_timeout: Duration::from_secs(2),
            reader_cache_bytes: 64 << 20,
            read_ahead_bytes: 8 << 20,
            s3_max_attempts: 6,
            azure: None,
        }
    }

    /// The TOML text.
    pub fn to_toml(&self) -> String {
        let mut t = String::new();
        let ms = |d: Duration| format!("\"{}ms\"", d.as_millis());
        let _ = writeln!(
            t,
            "# Generated by the lakestream-e2e harness.\n[http]\naddr = \"127.0.0.1:{}\"\n",
            self.http_port
        );
        let r = self.roles;
        let _ = writeln!(
            t,
            "[roles]\nwriter = {}\nreader = {}\ncatalog = {}\ncompactor = {}\n",
            r.writer, r.reader, r.catalog, r.compactor
        );
        match &self.metadata {
            Metadata::Embedded(path) => {
                let _ = writeln!(
                    t,
                    "[metadata]\nbackend = \"embedded\"\npath = {}\n",
                    quote(&path.to_string_lossy())
                );
            }
            Metadata::Oxia { addresses, namespace } => {
                let addresses: Vec<String> = addresses.iter().map(|a| quote(a)).collect();
                let _ = writeln!(
                    t,
                    "[metadata]\nbackend = \"oxia\"\naddresses = [{}]\nnamespace = {}\nsession_timeout = \"5s\"\nrequest_timeout = \"10s\"\n",
                    addresses.join(", "),
                    quote(namespace)
                );
            }
        }
        for root in ["wal", "compacted"] {
            if let Some(azure) = &self.azure {
                let _ = writeln!(
                    t,
                    "[storage.{root}]\nbackend = \"azure\"\nurl = {}\naccount = {}\nendpoint = {}\n\
                     access_key = {}\nmax_attempts = {}\n\
                     initial_backoff = \"20ms\"\nmax_backoff = \"500ms\"\nattempt_timeout = \"20s\"\n",
                    quote(&format!("az://{}/{}/{root}", azure.container, self.prefix)),
                    quote(&azure.account),
                    quote(&azure.endpoint),
                    quote(&azure.access_key),
                    self.s3_max_attempts,
                );
                continue;
            }
            let _ = writeln!(
                t,
                "[storage.{root}]\nbackend = \"s3\"\nbucket = {}\nprefix = {}\nendpoint = {}\nregion = {}\n\
                 access_key_id = {}\nsecret_access_key = {}\nforce_path_style = true\nmax_attempts = {}\n\
                 initial_backoff = \"20ms\"\nmax_backoff = \"500ms\"\nattempt_timeout = \"20s\"\n",
                quote(&self.s3.bucket),
                quote(&format!("{}/{root}", self.prefix)),
                quote(&self.s3_endpoint),
                quote(&self.s3.region),
                quote(&self.s3.access_key),
                quote(&self.s3.secret_key),
                self.s3_max_attempts,
            );
        }
        let _ = writeln!(
            t,
            "[writer]\nflush_window = {}\nsession_timeout = {}\n",
            ms(self.flush_window),
            ms(self.writer_session_timeout)
        );
        // The reader's index cache must stay below what the compactor's grace checks assume.
        let _ = writeln!(
            t,
            "[reader]\nindex_cache_ttl = \"1s\"\nobject_cache_bytes = {}\nread_ahead_bytes = {}\n",
            self.reader_cache_bytes, self.read_ahead_bytes
        );
        let c = &self.compaction;
        let _ = writeln!(
            t,
            "[compactor]\nmax_range_bytes = {}\nmax_range_age = {}\nmax_file_bytes = {}\nwal_grace = {}\n\
             reader_index_cache_ttl = \"2s\"\nsession_timeout = \"2s\"\n\n[compactor.reader]\nobject_cache_bytes = {}\n\
             read_ahead_bytes = {}\n",
            c.max_range_bytes,
            ms(c.max_range_age),
            c.max_file_bytes,
            ms(c.wal_grace),
            self.reader_cache_bytes,
            self.read_ahead_bytes,
        );
        let _ = writeln!(
            t,
            "[compactor_schedule]\ninterval = {}\ngc_interval = {}",
            ms(c.interval),
            ms(c.gc_interval)
        );
        t
    }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");
    }

    #[test]
    fn the_generated_file_names_every_section() {
        let s3 = S3Env {
            endpoint: "http://127.0.0.1:9000".into(),
            bucket: "b".into(),
            access_key: "k".into(),
            secret_key: "s".into(),
            region: "us-east-1".into(),
        };
        let mut c = ServiceConfig::all_in_one(8080, "/tmp/x/meta.redb".into(), s3, "run-1");
        c.metadata = Metadata::Oxia {
            addresses: vec!["127.0.0.1:6648".into(), "127.0.0.1:6658".into()],
            namespace: "default".into(),
        };
        let t = c.to_toml();
        for needle in [
            "addr = \"127.0.0.1:8080\"",
            "backend = \"oxia\"",
            "addresses = [\"127.0.0.1:6648\", \"127.0.0.1:6658\"]",
            "prefix = \"run-1/wal\"",
            "prefix = \"run-1/compacted\"",
            "max_range_bytes = 49152",
            "[compactor_schedule]",
        ] {
            assert!(t.contains(needle), "{needle} missing from:\n{t}");
        }
    }
}
