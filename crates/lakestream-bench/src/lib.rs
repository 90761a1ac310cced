//! End-to-end benchmarks of a Lakestream stack, with their baselines measured on the same
//! stores in the same run.
//!
//! Vocabulary:
//! - a **scenario** (`produce`, `consume`, `compact`, `events`) drives one path of the
//!   system, in process, over a [`Stack`](lakestream_service::testkit::Stack) opened from the same
//!   [`BenchConfig`] the services use; `meta` drives the
//!   stack's metadata store alone, the baseline of the writer's publishing;
//! - a **baseline** is the raw cost of what that path must do at least: `ObjectStore::put`
//!   and `get` of the same object sizes at the same concurrency, `MetaStore::sequenced_put`s
//!   at the writer's concurrency, a raw read-and-write copy of the same WAL bytes;
//! - a **ratio** divides our figure by its baseline's; ratios carry across machines far
//!   better than absolute figures, which is why every run measures its own baselines;
//! - a **target** is one of issue #12's goals, checked against the run (met, or missed by how
//!   much).
//!
//! [`run`] runs a scenario and returns its [`ScenarioReport`] ([`prepare`] writes its data
//! set, [`measure`] measures it, possibly in another process); [`report::write`] renders
//! reports as JSON, Markdown and PNG plots. `lakestream bench` ([`cli`]) is the command: it
//! runs each scenario's steps in processes of their own, so that peak RSS is the role's.
#![deny(missing_docs)]

pub mod baseline;
pub mod cli;
mod consume;
mod events;
pub mod hist;
pub mod meta;
pub mod meter;
pub mod plot;
pub mod report;
pub mod scenarios;
pub mod sys;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use report::ScenarioReport;

/// What a run reads of a service configuration: the service's settings (stores, roles) and
/// the HTTP and gRPC APIs' (for the consume scenario's clients).
#[derive(Debug, Clone, Default)]
pub struct BenchConfig {
    /// The service layer's settings.
    pub service: lakestream_service::ServiceConfig,
    /// The HTTP and gRPC APIs' settings.
    pub server: lakestream_server::ServerConfig,
}

impl BenchConfig {
    /// The embedded metadata store and local files under `data_dir`, as `lakestream dev`
    /// runs, with the APIs on free loopback ports.
    pub fn dev(data_dir: &std::path::Path) -> BenchConfig {
        let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        BenchConfig {
            service: lakestream_service::ServiceConfig::dev(data_dir),
            server: lakestream_server::ServerConfig::dev(loopback, Some(loopback)),
        }
    }
}

/// Reads a service configuration file as `lakestream serve` does (its environment
/// variables included): the `lakestream` command's loader, handed to [`cli::main`].
pub type ConfigLoader = fn(&std::path::Path) -> Result<BenchConfig, String>;
pub use scenarios::{BenchContext, DataSet, Scenario, measure, prepare, run};

/// The knobs of a run. `None` takes the value from the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knobs {
    /// How many logs (partitions of the bench stream) the load spreads over.
    pub logs: u32,
    /// Payload bytes per entry.
    pub entry_bytes: usize,
    /// Target rate in entries per second over all logs; 0 = as fast as possible (closed loop).
    pub rate: u64,
    /// The writer's flush window, ms.
    pub flush_window_ms: Option<u64>,
    /// The writer's bound on unacknowledged bytes.
    pub in_flight_bytes: Option<usize>,
    /// How long each measured phase runs, seconds (when `count` is 0).
    pub duration_s: f64,
    /// How many entries to write instead of running for a time; 0 = use `duration_s`.
    pub count: u64,
    /// Concurrent producers in the closed loop; 0 = enough to fill the in-flight bound.
    pub concurrency: usize,
    /// The data set `consume` and `compact` write before measuring, MiB of payload;
    /// 0 = write for `duration_s` or `count` like `produce`.
    pub data_mib: u64,
    /// The log `consume` catches up on from its first offset, MiB of payload.
    pub catch_up_mib: u64,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            logs: 8,
            entry_bytes: 16 << 10,
            rate: 0,
            flush_window_ms: None,
            in_flight_bytes: None,
            duration_s: 20.0,
            count: 0,
            concurrency: 0,
            data_mib: 512,
            catch_up_mib: 1024,
        }
    }
}

impl Knobs {
    /// Checks every knob; names the one that is wrong.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |knob: &'static str, message: &str| Err(BenchError::Knob { knob, message: message.into() });
        if self.logs == 0 {
            return bad("logs", "must be at least 1");
        }
        if self.entry_bytes == 0 {
            return bad("entry-bytes", "must be at least 1");
        }
        if self.count == 0 && !(self.duration_s.is_finite() && self.duration_s > 0.0) {
            return bad("duration", "must be a positive number of seconds when --count is 0");
        }
        if self.flush_window_ms == Some(0) {
            return bad("flush-window-ms", "must be at least 1");
        }
        if self.in_flight_bytes.is_some_and(|b| b < self.entry_bytes) {
            return bad("in-flight-bytes", "must be at least --entry-bytes");
        }
        Ok(())
    }

    /// The measured phase's length.
    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.duration_s.max(0.0))
    }
}

/// Why a run failed; names what was being done.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A knob is out of range.
    #[error("invalid --{knob}: {message}")]
    Knob {
        /// The knob's flag name.
        knob: &'static str,
        /// Its rule.
        message: String,
    },
    /// The configuration could not be read or is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// The stack could not be opened.
    #[error("cannot open the stack: {0}")]
    Start(#[from] lakestream_service::StartError),
    /// An operation of the system under test or of a baseline failed.
    #[error("{what}: {message}")]
    Operation {
        /// What was being done.
        what: String,
        /// The error.
        message: String,
    },
    /// A report file could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("plot {file}: {message}")]
    Plot {
        /// The file.
        file: String,
        /// The error.
        message: String,
    },
    /// The scenario depends on something this build does not have yet.
    #[error("scenario `{scenario}` is not available yet: {reason}")]
    Unavailable {
        /// The scenario.
        scenario: &'static str,
        /// Why.
        reason: String,
    },
}

/// `map_err` helper: `.map_err(err("raw PUT"))`.
pub(crate) fn err<E: std::fmt::Display>(what: impl Into<String>) -> impl FnOnce(E) -> BenchError {
    let what = what.into();
    move |e| BenchError::Operation { what, message: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_are_checked() {
        assert!(Knobs::default().validate().is_ok());
        let cases = [
            (Knobs { logs: 0, ..Knobs::default() }, "logs"),
            (Knobs { entry_bytes: 0, ..Knobs::default() }, "entry-bytes"),
            (Knobs { duration_s: 0.0, ..Knobs::default() }, "duration"),
            (Knobs { duration_s: f64::NAN, ..Knobs::default() }, "duration"),
            (Knobs { flush_window_ms: Some(0), ..Knobs::default() }, "flush-window-ms"),
            (Knobs { in_flight_bytes: Some(10), ..Knobs::default() }, "in-flight-bytes"),
        ];
        for (k, name) in cases {
            match k.validate() {
                Err(BenchError::Knob { knob, .. }) => assert_eq!(knob, name),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(Knobs { duration_s: 0.0, count: 10, ..Knobs::default() }.validate().is_ok());
    }
}
