//! Counting work as it happens: a [`Meter`] the load adds to, a sampler task that turns it into
//! per-second throughput and RSS samples, and a one-line progress bar on stderr.

use std::io::{IsTerminal as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Work done so far; shared by the load tasks.
#[derive(Debug, Default)]
pub struct Meter {
    bytes: AtomicU64,
    ops: AtomicU64,
}

impl Meter {
    /// A meter at zero.
    pub fn new() -> Arc<Meter> {
        Arc::new(Meter::default())
    }

    /// Counts one operation of `bytes`.
    pub fn add(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.ops.fetch_add(1, Ordering::Relaxed);
    }

    /// (bytes, operations) so far.
    pub fn read(&self) -> (u64, u64) {
        (self.bytes.load(Ordering::Relaxed), self.ops.load(Ordering::Relaxed))
    }
}

/// One point of the time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Sample {
    /// Seconds since the phase started (end of the sampled interval).
    pub t_s: f64,
    /// Throughput over the interval, MB/s (10⁶ bytes).
    pub mb_s: f64,
    /// Operations per second over the interval.
    pub ops_s: f64,
    /// Resident memory at the end of the interval, MiB (absent off Linux).
    pub rss_mib: Option<f64>,
}

/// What the progress bar counts towards.
#[derive(Debug, Clone, Copy)]
pub enum Goal {
    /// A fixed time.
    Time(Duration),
    /// A number of operations.
    Ops(u64),
    /// A number of bytes.
    Bytes(u64),
}

/// The result of a sampled phase.
#[derive(Debug, Clone, Default)]
pub struct Sampled {
    /// Per-second samples.
    pub samples: Vec<Sample>,
    /// The highest RSS seen, bytes (sampled every 100 ms).
    pub peak_rss: Option<u64>,
}

/// A running sampler; [`Sampler::stop`] ends it and returns what it saw.
#[derive(Debug)]
pub struct Sampler {
    stop: watch::Sender<bool>,
    task: JoinHandle<Sampled>,
}

impl Sampler {
    /// Starts sampling `meter`; draws a progress bar labelled `label` when `progress` is set.
    pub fn start(meter: Arc<Meter>, label: String, goal: Goal, progress: bool) -> Sampler {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let bar = progress.then(|| ProgressBar::new(label, goal));
            let started = Instant::now();
            let mut out = Sampled::default();
            let (mut last_bytes, mut last_ops) = meter.read();
            let mut last_t = started;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut ticks = 0u64;
            loop {
                let ending = tokio::select! {
                    _ = tick.tick() => false,
                    _ = stopped.changed() => true,
                };
                let rss = crate::sys::rss_bytes();
                if let Some(r) = rss {
                    out.peak_rss = Some(out.peak_rss.unwrap_or(0).max(r));
                }
                ticks += 1;
                let now = Instant::now();
                let dt = now.duration_since(last_t).as_secs_f64();
                // One sample per second; the last partial second only if it is long enough
                // to mean something.
                if dt > 0.0 && ((ticks.is_multiple_of(10) && !ending) || (ending && dt >= 0.25)) {
                    let (bytes, ops) = meter.read();
                    out.samples.push(Sample {
                        t_s: now.duration_since(started).as_secs_f64(),
                        mb_s: (bytes - last_bytes) as f64 / dt / 1e6,
                        ops_s: (ops - last_ops) as f64 / dt,
                        rss_mib: rss.map(|r| r as f64 / f64::from(1u32 << 20)),
                    });
                    (last_bytes, last_ops, last_t) = (bytes, ops, now);
                }
                if let Some(bar) = &bar
                    && (ticks.is_multiple_of(5) || ending)
                {
                    let (bytes, ops) = meter.read();
                    bar.draw(now.duration_since(started), bytes, ops, rss, ending);
                }
                if ending {
                    return out;
                }
            }
        });
        Sampler { stop, task }
    }

    /// Stops the sampler (takes a final partial sample) and returns the series.
    pub async fn stop(self) -> Sampled {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// A single redrawn line on a terminal; a line every few seconds otherwise (logs stay short).
#[derive(Debug)]
struct ProgressBar {
    label: String,
    goal: Goal,
    tty: bool,
    last_line: std::sync::Mutex<Option<std::time::Instant>>,
}

impl ProgressBar {
    fn new(label: String, goal: Goal) -> ProgressBar {
        ProgressBar {
            label,
            goal,
            tty: std::io::stderr().is_terminal(),
            last_line: std::sync::Mutex::new(None),
        }
    }

    fn draw(&self, elapsed: Duration, bytes: u64, ops: u64, rss: Option<u64>, done: bool) {
        if !self.tty && !done {
            let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < Duration::from_secs(5)) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        let fraction = match self.goal {
            Goal::Time(d) => elapsed.as_secs_f64() / d.as_secs_f64().max(1e-9),
            Goal::Ops(n) => ops as f64 / (n.max(1)) as f64,
            Goal::Bytes(n) => bytes as f64 / (n.max(1)) as f64,
        };
        let line = progress_line(&self.label, if done { 1.0 } else { fraction }, elapsed, bytes, ops, rss);
        let mut err = std::io::stderr().lock();
        let _ = if self.tty {
            write!(err, "\r{line}\x1b[K{}", if done { "\n" } else { "" })
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }
}

/// `label [#####-----]  50%  12.3 s  45.6 MB/s  1234 ops  RSS 120 MiB`
pub(crate) fn progress_line(
    label: &str,
    fraction: f64,
    elapsed: Duration,
    bytes: u64,
    ops: u64,
    rss: Option<u64>,
) -> String {
    const WIDTH: usize = 24;
    let fraction = if fraction.is_finite() { fraction.clamp(0.0, 1.0) } else { 0.0 };
    let filled = (fraction * WIDTH as f64).round() as usize;
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { bytes as f64 / secs / 1e6 } else { 0.0 };
    let rss = rss.map_or_else(|| "n/a".to_string(), |r| format!("{} MiB", r >> 20));
    format!(
        "{label:<22} [{}{}] {:>3.0}% {secs:>6.1} s {rate:>8.1} MB/s {ops:>9} ops  RSS {rss}",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
        fraction * 100.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line_is_bounded() {
        let l = progress_line("produce", 0.5, Duration::from_secs(2), 4_000_000, 10, Some(3 << 20));
        assert!(l.contains("[############------------]"), "{l}");
        assert!(l.contains("2.0 MB/s") && l.contains("RSS 3 MiB") && l.contains(" 50%"), "{l}");
        let over = progress_line("x", 7.0, Duration::ZERO, 0, 0, None);
        assert!(over.contains("100%") && over.contains("RSS n/a"), "{over}");
        let nan = progress_line("x", f64::NAN, Duration::ZERO, 0, 0, None);
        assert!(nan.contains("  0%"), "{nan}");
    }

    #[tokio::test(start_paused = true)]
    async fn sampler_takes_one_sample_per_second() {
        let meter = Meter::new();
        let sampler = Sampler::start(meter.clone(), "t".into(), Goal::Ops(1), false);
        for _ in 0..30 {
            meter.add(100_000);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let sampled = sampler.stop().await;
        // 3 s of work: 2 or 3 whole-second samples plus possibly a final partial one.
        assert!((2..=4).contains(&sampled.samples.len()), "{:?}", sampled.samples);
        assert!(sampled.samples.windows(2).all(|w| w[0].t_s < w[1].t_s));
        // 10 adds of 100 kB per (virtual) second.
        for s in &sampled.samples {
            assert!((s.mb_s - 1.0).abs() < 0.2 && (s.ops_s - 10.0).abs() < 2.0, "{s:?}");
        }
    }
}
