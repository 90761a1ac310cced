//! `lakestream bench`: the command-line front of this crate (the `lakestream` binary
//! flattens [`BenchArgs`] into its `bench` subcommand).

use std::path::PathBuf;
use std::process::ExitCode;

use lakestream_format::{Clock as _, SystemClock};
use lakestream_server::ServerConfig;

use crate::scenarios::{BenchContext, Scenario};
use crate::{BenchError, Knobs};

/// Which scenarios to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    /// Appends through the writer vs raw PUTs and sequenced puts.
    Produce,
    /// Reads as clients see them (HTTP and gRPC): cold, cached, compacted and catch-up, vs
    /// raw GETs of the same objects.
    Consume,
    /// Compaction vs a raw read-and-write copy.
    Compact,
    /// CloudEvents with deduplication vs plain produce.
    Events,
    /// The metadata store's own sequenced puts (one in flight per log, pipelined) and plain
    /// puts, raw: the baseline of the writer's index publishing.
    Meta,
    /// Every scenario, one after another, on one stack.
    All,
}

/// `lakestream bench SCENARIO... [--config FILE] [knobs] --out DIR`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The scenarios, run one after another on one stack in the order given (`all`: every
    /// one).
    #[arg(value_enum, required = true, num_args = 1..)]
    pub scenario: Vec<Which>,
    /// A service configuration file (TOML, as `serve` reads, `LAKESTREAM_SECTION__KEY`
    /// environment variables included). Without it: the embedded
    /// metadata store and local files in a fresh directory under --out, removed afterwards.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Where the report goes (report.json, report.md, PNG plots).
    #[arg(long)]
    pub out: PathBuf,
    /// Logs (partitions) the load spreads over.
    #[arg(long, default_value_t = Knobs::default().logs)]
    pub logs: u32,
    /// Payload bytes per entry.
    #[arg(long, default_value_t = Knobs::default().entry_bytes)]
    pub entry_bytes: usize,
    /// Entries per second over all logs; 0 = as fast as possible.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// The writer's flush window in ms (default: the configuration's).
    #[arg(long)]
    pub flush_window_ms: Option<u64>,
    /// The writer's in-flight bound in bytes (default: the configuration's).
    #[arg(long)]
    pub in_flight_bytes: Option<usize>,
    /// Seconds each measured phase runs.
    #[arg(long, default_value_t = Knobs::default().duration_s)]
    pub duration: f64,
    /// Entries to write instead of running for --duration (0: use --duration).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// Concurrent producers in the closed loop (0: enough to fill the in-flight bound).
    #[arg(long, default_value_t = 0)]
    pub concurrency: usize,
    /// MiB of payload `consume` and `compact` write before measuring (0: as --duration/--count).
    #[arg(long, default_value_t = Knobs::default().data_mib)]
    pub data_mib: u64,
    /// MiB of payload in the one log `consume` catches up on from its first offset.
    #[arg(long, default_value_t = Knobs::default().catch_up_mib)]
    pub catch_up_mib: u64,
    /// A title for the report.
    #[arg(long, default_value = "Lakestream benchmark")]
    pub title: String,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

impl BenchArgs {
    fn knobs(&self) -> Knobs {
        Knobs {
            logs: self.logs,
            entry_bytes: self.entry_bytes,
            rate: self.rate,
            flush_window_ms: self.flush_window_ms,
            in_flight_bytes: self.in_flight_bytes,
            duration_s: self.duration,
            count: self.count,
            concurrency: self.concurrency,
            data_mib: self.data_mib,
            catch_up_mib: self.catch_up_mib,
        }
    }
}

/// Runs the command on a fresh multi-threaded runtime; prints where the report went.
pub fn main(args: BenchArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lakestream bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ (BenchError::Knob { .. } | BenchError::Config(_))) => {
            eprintln!("lakestream bench: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("lakestream bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The scenarios `which` names, in order, each once (`all` expands to every scenario).
fn scenarios(which: &[Which]) -> Vec<Scenario> {
    let mut out: Vec<Scenario> = Vec::new();
    for w in which {
        let named: &[Scenario] = match w {
            Which::Produce => &[Scenario::Produce],
            Which::Consume => &[Scenario::Consume],
            Which::Compact => &[Scenario::Compact],
            Which::Events => &[Scenario::Events],
            Which::Meta => &[Scenario::Meta],
            Which::All => &Scenario::ALL,
        };
        for s in named {
            if !out.contains(s) {
                out.push(*s);
            }
        }
    }
    out
}

async fn run(args: &BenchArgs) -> Result<(), BenchError> {
    let run_id = format!("r{}", SystemClock.now_ms());
    let (config, scratch) = match &args.config {
        Some(file) => {
            // As `serve` reads it: `LAKESTREAM_SECTION__KEY` variables set keys over the file.
            let mut c =
                ServerConfig::load(file, std::env::vars()).map_err(|e| BenchError::Config(e.to_string()))?;
            c.apply_env(|v| std::env::var(v).ok()).map_err(|e| BenchError::Config(e.to_string()))?;
            (c, None)
        }
        None => {
            let dir = args.out.join(format!("data-{run_id}"));
            (ServerConfig::dev(&dir, ([127, 0, 0, 1], 0).into()), Some(dir))
        }
    };
    let scenarios = scenarios(&args.scenario);
    let result = async {
        let ctx = BenchContext::open(config, args.knobs(), &run_id, !args.quiet).await?;
        let mut reports = Vec::new();
        let mut outcome = Ok(());
        for s in &scenarios {
            match crate::run(&ctx, *s).await {
                Ok(r) => reports.push(r),
                // `all` goes on without a scenario this build cannot run, and says so.
                Err(e @ BenchError::Unavailable { .. }) if scenarios.len() > 1 => {
                    eprintln!("lakestream bench: skipped: {e}")
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        ctx.close().await;
        if !reports.is_empty() {
            let written = crate::report::write(&reports, &args.title, &args.out)?;
            println!("{}", written.markdown.display());
            for r in &reports {
                for t in &r.targets {
                    println!(
                        "{:8} {:<70} {:>10.2} {:<5} {} ({})",
                        r.scenario,
                        t.name,
                        t.measured,
                        t.unit,
                        if t.met { "met" } else { "MISSED" },
                        t.margin
                    );
                }
            }
        }
        outcome
    }
    .await;
    if let Some(dir) = scratch {
        // Best effort: a leftover scratch directory is only disk space.
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn several_scenarios_run_in_the_order_given_each_once() {
        let cli = Cli::try_parse_from(["bench", "meta", "produce", "consume", "meta", "--out", "x"]).unwrap();
        assert_eq!(scenarios(&cli.bench.scenario), [Scenario::Meta, Scenario::Produce, Scenario::Consume]);
        let cli = Cli::try_parse_from(["bench", "all", "--out", "x"]).unwrap();
        assert_eq!(scenarios(&cli.bench.scenario), Scenario::ALL);
        assert!(Cli::try_parse_from(["bench", "--out", "x"]).is_err());
    }
}
