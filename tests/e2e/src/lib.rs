//! The end-to-end harness: real `lakestream` processes on loopback, driven over the HTTP API,
//! storing into a real S3 server and a real metadata store, with faults made from outside the
//! process (kill -9, connections reset on the way to S3).
//!
//! | module | what |
//! |---|---|
//! | [`env`](mod@env) | what the environment names: the S3 server, Oxia, an external stack, soak lengths |
//! | [`config`] | the TOML a spawned service reads (roles, metadata, S3, compaction pace) |
//! | [`process`] | spawns `lakestream serve`, waits for `/readyz`, kills by PID, reads RSS and logs |
//! | [`api`] | a small HTTP client of the v1 API that classifies every append's outcome |
//! | [`checker`] | sequence-numbered producers and the verifier (lost, reordered, duplicates) |
//! | [`history`] | the record of every append, read, tail and trim for the linearizability checker |
//! | [`lin`] | tail readers, a trimmer, reads to the end, and the Porcupine checker (`tests/lincheck`) |
//! | [`proxy`] | a TCP proxy that resets connections at random |
//! | [`s3_faults`] | an HTTP proxy before the S3 server that answers 503 SlowDown and slows PUTs |
//! | `containers` | (feature `testcontainers`) Oxia and MinIO in Docker |
//!
//! The suites in `tests/` fail, never skip, when what they need is missing: the S3 variables
//! (`scripts/test` sets them), the `lakestream` binary (`cargo build -p lakestream-cli`), and
//! for the separate-process topology a real Oxia (`LAKESTREAM_TEST_OXIA`, also set by
//! `scripts/test`). See `docs/reliability.md` for what each suite proves and the soak commands.
#![deny(missing_docs)]

pub mod api;
pub mod checker;
pub mod config;
#[cfg(feature = "testcontainers")]
pub mod containers;
pub mod env;
pub mod history;
pub mod lin;
pub mod process;
pub mod proxy;
pub mod rng;
pub mod s3_faults;

/// Why the harness could not do what a test asked; the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Error(message.into())
    }
}

/// The harness's results.
pub type Result<T> = std::result::Result<T, Error>;
