//! `lakestream bench`: the command-line front of this crate (the `lakestream` binary
//! flattens [`BenchArgs`] into its `bench` subcommand).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::{BenchConfig, ConfigLoader};
use lakestream_format::{Clock as _, SystemClock};

use crate::report::ScenarioReport;
use crate::scenarios::{BenchContext, Scenario};
use crate::{BenchError, Knobs, err};

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

/// One step of one scenario, run by a child process of `lakestream bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Step {
    /// Write the scenario's data sets (consume, compact) and record them.
    Prepare,
    /// Measure the scenario (over the recorded data sets) and record its report.
    Measure,
}

/// `lakestream bench SCENARIO... [--config FILE] [knobs] --out DIR`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The scenarios, run one after another on one stack in the order given (`all`: every
    /// one), each measured in a process of its own, so that its peak RSS is its role's: for
    /// `consume` and `compact`, one process writes the data set and exits, then a fresh one
    /// with no writer measures the reader or the compactor.
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
    /// Internal: the step this process runs (`lakestream bench` runs itself once per step).
    #[arg(long, hide = true, value_enum, requires_all = ["child_scenario", "run_id"])]
    pub child: Option<Step>,
    /// Internal: the scenario of `--child`.
    #[arg(long, hide = true, value_enum)]
    pub child_scenario: Option<Which>,
    /// Internal: the run this child process belongs to (its streams, prefixes and files).
    #[arg(long, hide = true)]
    pub run_id: Option<String>,
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

/// Runs the command: the scenarios one after another, each step in a child process (this
/// program run again with `--child`); prints where the report went. Configuration files are
/// read with `load`.
pub fn main(args: BenchArgs, load: ConfigLoader) -> ExitCode {
    let outcome = match (args.child, args.child_scenario, args.run_id.as_deref()) {
        (Some(step), Some(which), Some(run_id)) => {
            match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(child(&args, load, step, which, run_id)),
                Err(e) => {
                    eprintln!("lakestream bench: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => run(&args, load),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ (BenchError::Knob { .. } | BenchError::Config(_))) => {
            eprintln!("lakestream bench: {e}");
            ExitCode::from(2)
        }
        Err(e @ BenchError::Unavailable { .. }) => {
            eprintln!("lakestream bench: {e}");
            ExitCode::from(UNAVAILABLE)
        }
        Err(e) => {
            eprintln!("lakestream bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A child's exit status when its scenario is not available in this build.
const UNAVAILABLE: u8 = 3;

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

/// The configuration of the run: the file's, or (without one) the embedded store and local
/// files in `data-RUN_ID` under --out, which the caller removes when the run is over.
fn config_of(
    args: &BenchArgs,
    load: ConfigLoader,
    run_id: &str,
) -> Result<(BenchConfig, Option<PathBuf>), BenchError> {
    match &args.config {
        // As `serve` reads it: `LAKESTREAM_SECTION__KEY` variables set keys over the file.
        Some(file) => Ok((load(file).map_err(BenchError::Config)?, None)),
        None => {
            let dir = args.out.join(format!("data-{run_id}"));
            Ok((BenchConfig::dev(&dir), Some(dir)))
        }
    }
}

/// Where the children of run `run_id` leave their data sets and reports.
fn steps_dir(args: &BenchArgs, run_id: &str) -> PathBuf {
    args.out.join(format!("steps-{run_id}"))
}

fn data_file(args: &BenchArgs, run_id: &str, which: Scenario) -> PathBuf {
    steps_dir(args, run_id).join(format!("{}-data.json", which.name()))
}

fn report_file(args: &BenchArgs, run_id: &str, which: Scenario) -> PathBuf {
    steps_dir(args, run_id).join(format!("{}-report.json", which.name()))
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), BenchError> {
    let io = |source| BenchError::Io { path: path.to_path_buf(), source };
    let text = serde_json::to_vec(value).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(path, text).map_err(io)
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, BenchError> {
    let io = |source| BenchError::Io { path: path.to_path_buf(), source };
    let text = std::fs::read(path).map_err(io)?;
    serde_json::from_slice(&text).map_err(|e| io(std::io::Error::other(e)))
}

/// The arguments of a child running `step` of `which`: this process's own, which name the
/// scenarios, knobs and stores, plus the step.
fn child_args(own: &[OsString], step: Step, which: Which, run_id: &str) -> Vec<OsString> {
    fn value<V: clap::ValueEnum>(v: &V) -> String {
        v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
    }
    let mut args = own.to_vec();
    for (flag, v) in
        [("--child", value(&step)), ("--child-scenario", value(&which)), ("--run-id", run_id.to_string())]
    {
        args.push(flag.into());
        args.push(v.into());
    }
    args
}

fn which_of(s: Scenario) -> Which {
    match s {
        Scenario::Produce => Which::Produce,
        Scenario::Consume => Which::Consume,
        Scenario::Compact => Which::Compact,
        Scenario::Events => Which::Events,
        Scenario::Meta => Which::Meta,
    }
}

/// glibc's limit on its malloc arenas.
const ARENAS: &str = "MALLOC_ARENA_MAX";
/// The compactor role's arenas as deployed.
const COMPACTOR_ARENAS: &str = "2";

/// Runs `step` of `s` in a child process and waits for it.
fn spawn_step(s: Scenario, step: Step, run_id: &str) -> Result<(), BenchError> {
    let what = format!("the {} scenario's {step:?} process", s.name()).to_lowercase();
    let program = std::env::current_exe().map_err(err(format!("{what}: this program's path")))?;
    let own: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut child = std::process::Command::new(program);
    child.args(child_args(&own, step, which_of(s), run_id));
    if s == Scenario::Compact && step == Step::Measure && std::env::var_os(ARENAS).is_none() {
        // The compactor as deployed (docker-compose.yml, the Helm chart's compactor role):
        // two glibc arenas, which keep its peak RSS within its bound (docs/performance.md).
        child.env(ARENAS, COMPACTOR_ARENAS);
    }
    let status = child.status().map_err(err(format!("starting {what}")))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(c) if c == i32::from(UNAVAILABLE) => {
            Err(BenchError::Unavailable { scenario: s.name(), reason: format!("{what} said so (see above)") })
        }
        _ => Err(BenchError::Operation { what, message: format!("{status} (see above)") }),
    }
}

/// A child: one step of one scenario on the run's stack, its outcome left in the run's steps
/// directory. A measuring child of `consume` or `compact` has no writer.
async fn child(
    args: &BenchArgs,
    load: ConfigLoader,
    step: Step,
    which: Which,
    run_id: &str,
) -> Result<(), BenchError> {
    let [s] = <[Scenario; 1]>::try_from(scenarios(&[which]))
        .map_err(|_| BenchError::Config("--child-scenario names one scenario, not all".into()))?;
    let (config, _) = config_of(args, load, run_id)?;
    let writer = step == Step::Prepare || !s.has_data_set();
    let ctx = BenchContext::open_for(config, args.knobs(), run_id, !args.quiet, writer).await?;
    let outcome = match step {
        Step::Prepare => match crate::scenarios::prepare(&ctx, s).await {
            Ok(data) => write_json(&data_file(args, run_id, s), &data),
            Err(e) => Err(e),
        },
        Step::Measure => {
            let data = if s.has_data_set() { read_json(&data_file(args, run_id, s)) } else { Ok(Vec::new()) };
            match data {
                Ok(data) => match crate::scenarios::measure(&ctx, s, data).await {
                    Ok(report) => write_json(&report_file(args, run_id, s), &report),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
        }
    };
    ctx.close().await;
    outcome
}

fn run(args: &BenchArgs, load: ConfigLoader) -> Result<(), BenchError> {
    args.knobs().validate()?;
    let run_id = format!("r{}", SystemClock.now_ms());
    // Read here too, so that a bad file is named before any child starts.
    let (_, scratch) = config_of(args, load, &run_id)?;
    let scenarios = scenarios(&args.scenario);
    let steps = steps_dir(args, &run_id);
    std::fs::create_dir_all(&steps).map_err(|source| BenchError::Io { path: steps.clone(), source })?;
    let mut reports: Vec<ScenarioReport> = Vec::new();
    let mut outcome = Ok(());
    for s in &scenarios {
        let ran = (if s.has_data_set() { spawn_step(*s, Step::Prepare, &run_id) } else { Ok(()) })
            .and_then(|()| spawn_step(*s, Step::Measure, &run_id))
            .and_then(|()| read_json(&report_file(args, &run_id, *s)));
        match ran {
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
    // Best effort: leftovers are only disk space.
    let _ = std::fs::remove_dir_all(&steps);
    if let Some(dir) = scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
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

    #[test]
    fn a_child_gets_the_arguments_of_its_parent_and_its_step() {
        let own: Vec<OsString> =
            ["bench", "consume", "compact", "--out", "x", "--duration", "3"].map(OsString::from).to_vec();
        let args = child_args(&own[1..], Step::Prepare, Which::Compact, "r7");
        let cli = Cli::try_parse_from(std::iter::once(OsString::from("bench")).chain(args)).unwrap();
        assert_eq!(cli.bench.child, Some(Step::Prepare));
        assert_eq!(cli.bench.child_scenario, Some(Which::Compact));
        assert_eq!(cli.bench.run_id.as_deref(), Some("r7"));
        assert_eq!(cli.bench.duration, 3.0);
        assert_eq!(cli.bench.scenario, [Which::Consume, Which::Compact]);
        // A step names its scenario and run.
        assert!(Cli::try_parse_from(["bench", "meta", "--out", "x", "--child", "measure"]).is_err());
    }
}
