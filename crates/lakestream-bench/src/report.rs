//! The report of a run: one [`ScenarioReport`] per scenario, rendered as JSON, a Markdown
//! table and PNG plots by [`write()`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::hist::{Histogram, LatencySummary};
use crate::meter::Sample;
use crate::{BenchError, Knobs};

/// What one scenario measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioReport {
    /// `produce`, `consume`, `compact` or `events`.
    pub scenario: String,
    /// The stores the run used, e.g. `wal=local metadata=embedded`.
    pub stores: String,
    /// The knobs, with the configuration's values filled in.
    pub knobs: Knobs,
    /// The effective flush window, ms.
    pub flush_window_ms: u64,
    /// The effective in-flight bound, bytes.
    pub in_flight_bytes: usize,
    /// Headline figures.
    pub figures: Vec<Figure>,
    /// Latency distributions: ours and the baselines'.
    pub latencies: Vec<Latency>,
    /// Our figures as ratios to their baselines.
    pub ratios: Vec<Ratio>,
    /// Throughput and RSS over time of the measured phase.
    pub samples: Vec<Sample>,
    /// Issue #12's targets, checked.
    pub targets: Vec<Target>,
    /// Anything a reader of the figures must know.
    pub notes: Vec<String>,
}

/// A named figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// What it is.
    pub name: String,
    /// Its value.
    pub value: f64,
    /// Its unit.
    pub unit: String,
}

/// A named latency distribution.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    /// What was timed.
    pub name: String,
    /// Percentiles.
    pub summary: LatencySummary,
    /// `(quantile, ms)` points for plotting.
    pub curve: Vec<(f64, f64)>,
}

impl Latency {
    /// Summarises `hist` under `name`.
    pub fn of(name: &str, hist: &Histogram) -> Latency {
        Latency { name: name.into(), summary: hist.summary(), curve: hist.curve() }
    }
}

/// Our figure over its baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// What is compared.
    pub name: String,
    /// Ours.
    pub ours: f64,
    /// The baseline.
    pub baseline: f64,
    /// The unit of both.
    pub unit: String,
    /// `ours / baseline`; absent when the baseline is zero or not a number.
    pub ratio: Option<f64>,
}

impl Ratio {
    /// `ours / baseline`.
    pub fn new(name: &str, ours: f64, baseline: f64, unit: &str) -> Ratio {
        Ratio { name: name.into(), ours, baseline, unit: unit.into(), ratio: ratio(ours, baseline) }
    }
}

/// `ours / baseline`, or `None` when that is not a finite number (a zero baseline).
pub fn ratio(ours: f64, baseline: f64) -> Option<f64> {
    let r = ours / baseline;
    (baseline != 0.0 && r.is_finite()).then_some(r)
}

/// One of issue #12's targets, checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The target, in words.
    pub name: String,
    /// The measured value.
    pub measured: f64,
    /// The limit it must reach (`at_least`) or stay under (`at_most`).
    pub limit: f64,
    /// The unit of both.
    pub unit: String,
    /// Whether the measured value must be at least the limit (else at most).
    pub at_least: bool,
    /// Whether it was met.
    pub met: bool,
    /// By how much it was met or missed, relative to the limit: `+12%` / `-30%` (missed).
    pub margin: String,
}

impl Target {
    /// `measured ≥ limit`.
    pub fn at_least(name: &str, measured: f64, limit: f64, unit: &str) -> Target {
        Target::new(name, measured, limit, unit, true)
    }

    /// `measured ≤ limit`.
    pub fn at_most(name: &str, measured: f64, limit: f64, unit: &str) -> Target {
        Target::new(name, measured, limit, unit, false)
    }

    fn new(name: &str, measured: f64, limit: f64, unit: &str, at_least: bool) -> Target {
        let met = if at_least { measured >= limit } else { measured <= limit };
        // Positive: room to spare; negative: missed by that much of the limit.
        let margin = match ratio(if at_least { measured - limit } else { limit - measured }, limit) {
            Some(r) => format!("{:+.0}%", r * 100.0),
            None => "n/a".into(),
        };
        Target { name: name.into(), measured, limit, unit: unit.into(), at_least, met, margin }
    }
}

/// The files [`write()`] produced.
#[derive(Debug, Clone)]
pub struct Written {
    /// `report.json`.
    pub json: PathBuf,
    /// `report.md`.
    pub markdown: PathBuf,
    /// The plots.
    pub plots: Vec<PathBuf>,
}

/// Writes `report.json`, `report.md` and two PNG plots per scenario into `dir` (created if
/// missing). `title` heads the Markdown.
pub fn write(reports: &[ScenarioReport], title: &str, dir: &Path) -> Result<Written, BenchError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BenchError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut plots = Vec::new();
    for r in reports {
        plots.push(crate::plot::latency(r, &dir.join(format!("{}-latency.png", r.scenario)))?);
        plots.push(crate::plot::throughput(r, &dir.join(format!("{}-throughput.png", r.scenario)))?);
    }
    let json = dir.join("report.json");
    let text = serde_json::to_string_pretty(reports).map_err(|e| BenchError::Operation {
        what: "encoding the JSON report".into(),
        message: e.to_string(),
    })?;
    std::fs::write(&json, text + "\n").map_err(io(&json))?;
    let markdown = dir.join("report.md");
    std::fs::write(&markdown, markdown_report(reports, title)).map_err(io(&markdown))?;
    Ok(Written { json, markdown, plots })
}

fn num(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// The Markdown report: a table of every target, then each scenario's figures, ratios,
/// latencies and plots (linked by file name, next to the Markdown).
pub fn markdown_report(reports: &[ScenarioReport], title: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# {title}\n");
    let _ = writeln!(md, "## Targets\n");
    let _ = writeln!(md, "| scenario | target | measured | limit | met | margin |");
    let _ = writeln!(md, "| --- | --- | ---: | ---: | :---: | ---: |");
    for r in reports {
        for t in &r.targets {
            let _ = writeln!(
                md,
                "| {} | {} | {} {} | {} {} {} | {} | {} |",
                r.scenario,
                t.name,
                num(t.measured),
                t.unit,
                if t.at_least { "≥" } else { "≤" },
                num(t.limit),
                t.unit,
                if t.met { "yes" } else { "**no**" },
                t.margin
            );
        }
    }
    for r in reports {
        let _ = writeln!(md, "\n## {}\n", r.scenario);
        let k = &r.knobs;
        let _ = writeln!(
            md,
            "{}; {} logs, {} B entries, rate {}, flush window {} ms, in-flight {} MiB, {}, concurrency {}, data set {}.\n",
            r.stores,
            k.logs,
            k.entry_bytes,
            if k.rate == 0 { "as fast as possible".to_string() } else { format!("{} entries/s", k.rate) },
            r.flush_window_ms,
            r.in_flight_bytes >> 20,
            if k.count > 0 {
                format!("{} entries", k.count)
            } else {
                format!("{} s per phase", k.duration_s)
            },
            if k.concurrency == 0 { "auto".to_string() } else { k.concurrency.to_string() },
            if k.data_mib == 0 { "as the load".to_string() } else { format!("{} MiB", k.data_mib) },
        );
        let _ = writeln!(md, "| figure | value |\n| --- | ---: |");
        for f in &r.figures {
            let _ = writeln!(md, "| {} | {} {} |", f.name, num(f.value), f.unit);
        }
        if !r.ratios.is_empty() {
            let _ =
                writeln!(md, "\n| ratio | ours | baseline | ours / baseline |\n| --- | ---: | ---: | ---: |");
            for x in &r.ratios {
                let _ = writeln!(
                    md,
                    "| {} | {} {} | {} {} | {} |",
                    x.name,
                    num(x.ours),
                    x.unit,
                    num(x.baseline),
                    x.unit,
                    x.ratio.map_or("n/a".into(), |v| format!("{v:.2}"))
                );
            }
        }
        if !r.latencies.is_empty() {
            let _ = writeln!(
                md,
                "\n| latency (ms) | count | p50 | p90 | p99 | p99.9 | max |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
            );
            for l in &r.latencies {
                let s = &l.summary;
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    l.name,
                    s.count,
                    num(s.p50_ms),
                    num(s.p90_ms),
                    num(s.p99_ms),
                    num(s.p999_ms),
                    num(s.max_ms)
                );
            }
        }
        for n in &r.notes {
            let _ = writeln!(md, "\n- {n}");
        }
        let _ = writeln!(
            md,
            "\n![{0} latency]({0}-latency.png)\n![{0} throughput and RSS]({0}-throughput.png)",
            r.scenario
        );
    }
    md
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;

    pub(crate) fn sample_report() -> ScenarioReport {
        let mut ours = Histogram::new();
        let mut raw = Histogram::new();
        for i in 1..=200u64 {
            ours.record(Duration::from_micros(i * 300));
            raw.record(Duration::from_micros(i * 100));
        }
        ScenarioReport {
            scenario: "produce".into(),
            stores: "wal=memory metadata=memory".into(),
            knobs: Knobs::default(),
            flush_window_ms: 20,
            in_flight_bytes: 64 << 20,
            figures: vec![Figure { name: "acknowledged".into(), value: 123.456, unit: "MB/s".into() }],
            latencies: vec![Latency::of("append ack", &ours), Latency::of("raw PUT", &raw)],
            ratios: vec![Ratio::new("acknowledged vs raw PUT", 80.0, 100.0, "MB/s")],
            samples: (1..=5)
                .map(|t| Sample {
                    t_s: f64::from(t),
                    mb_s: 100.0 + f64::from(t),
                    ops_s: 10.0,
                    rss_mib: Some(50.0),
                })
                .collect(),
            targets: vec![
                Target::at_least("produce ≥ 0.8 × raw PUT", 0.9, 0.8, "×"),
                Target::at_most("ack p99", 75.0, 50.0, "ms"),
            ],
            notes: vec!["a note".into()],
        }
    }

    #[test]
    fn ratios_and_targets() {
        assert_eq!(ratio(80.0, 100.0), Some(0.8));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(0.0, 0.0), None);
        assert_eq!(ratio(f64::NAN, 1.0), None);
        let r = Ratio::new("x", 3.0, 2.0, "MB/s");
        assert_eq!(r.ratio, Some(1.5));
        let t = Target::at_least("t", 0.9, 0.8, "×");
        assert!(t.met);
        assert_eq!(t.margin, "+12%");
        let t = Target::at_least("t", 0.4, 0.8, "×");
        assert!(!t.met);
        assert_eq!(t.margin, "-50%");
        let t = Target::at_most("t", 75.0, 50.0, "ms");
        assert!(!t.met);
        assert_eq!(t.margin, "-50%");
        let t = Target::at_most("t", 25.0, 50.0, "ms");
        assert!(t.met);
        assert_eq!(t.margin, "+50%");
        assert_eq!(Target::at_least("t", 1.0, 0.0, "x").margin, "n/a");
    }

    #[test]
    fn markdown_has_the_tables() {
        let md = markdown_report(&[sample_report()], "Run");
        assert!(md.starts_with("# Run\n"), "{md}");
        assert!(
            md.contains("| produce | produce ≥ 0.8 × raw PUT | 0.900 × | ≥ 0.800 × | yes | +12% |"),
            "{md}"
        );
        assert!(md.contains("| produce | ack p99 | 75.0 ms | ≤ 50.0 ms | **no** | -50% |"), "{md}");
        assert!(md.contains("| acknowledged | 123 MB/s |"), "{md}");
        assert!(md.contains("| acknowledged vs raw PUT | 80.0 MB/s | 100 MB/s | 0.80 |"), "{md}");
        // 30.0 and 59.4 ms at the histogram's bucket precision (within 1/64, never below).
        assert!(md.contains("| append ack | 200 | 30.1 | 54.0 | 59.8 | 60.0 | 60.0 |"), "{md}");
        assert!(md.contains("![produce latency](produce-latency.png)"), "{md}");
        assert!(md.contains("- a note"), "{md}");
    }

    #[test]
    fn json_and_png_files_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let written = write(&[sample_report()], "Run", dir.path()).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&written.json).unwrap()).unwrap();
        let first = &json[0];
        assert_eq!(first["scenario"], "produce");
        assert_eq!(first["ratios"][0]["ratio"], 0.8);
        assert_eq!(first["targets"][1]["met"], false);
        assert_eq!(first["latencies"][0]["summary"]["count"], 200);
        assert!(first["latencies"][0]["curve"].as_array().is_some_and(|c| c.len() > 10));
        assert_eq!(first["samples"].as_array().map(Vec::len), Some(5));
        assert_eq!(first["knobs"]["logs"], 8);
        assert!(std::fs::read_to_string(&written.markdown).unwrap().contains("## produce"));
        assert_eq!(written.plots.len(), 2);
        for p in &written.plots {
            let bytes = std::fs::read(p).unwrap();
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{}", p.display());
            assert!(bytes.len() > 1000);
        }
    }

    #[test]
    fn an_empty_scenario_still_renders() {
        let mut r = sample_report();
        r.samples.clear();
        r.latencies.clear();
        r.ratios.clear();
        let dir = tempfile::tempdir().unwrap();
        let written = write(&[r], "Empty", dir.path()).unwrap();
        assert_eq!(written.plots.len(), 2);
    }
}
