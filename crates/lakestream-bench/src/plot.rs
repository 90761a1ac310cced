//! PNG plots of a [`ScenarioReport`] with `plotters`: the latency distributions (ours and the
//! baselines') and throughput and RSS over time. Text is drawn with the bundled DejaVu Sans
//! (see `fonts/`), so no system font library is needed.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::BenchError;
use crate::report::ScenarioReport;

const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
const SIZE: (u32, u32) = (960, 540);
/// The x position of the maximum on the latency plot (past p99.9 at 3 nines).
const MAX_X: f64 = 3.3;

fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and known to parse; a failure would only lose the text.
        let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

fn failed(file: &Path) -> impl Fn(&dyn std::fmt::Debug) -> BenchError + '_ {
    move |e| BenchError::Plot { file: file.display().to_string(), message: format!("{e:?}") }
}

fn palette(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 6] = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x8c, 0x56, 0x4b),
    ];
    COLORS[i % COLORS.len()]
}

/// `q` → x in "nines": p50 at 0.3, p90 at 1, p99 at 2, p99.9 at 3; the maximum at [`MAX_X`].
fn nines(q: f64) -> f64 {
    if q >= 1.0 { MAX_X } else { (-(1.0 - q).log10()).min(3.0) }
}

fn nines_label(x: f64) -> String {
    match x {
        x if x >= MAX_X - 0.05 => "max".into(),
        x if (x - x.round()).abs() < 1e-6 => {
            let p = 100.0 * (1.0 - 10f64.powf(-x.round()));
            if (p - p.round()).abs() < 1e-6 { format!("p{p:.0}") } else { format!("p{p:.1}") }
        }
        _ => String::new(),
    }
}

/// Latency percentile curves, log-scaled milliseconds against percentile.
pub fn latency(report: &ScenarioReport, file: &Path) -> Result<PathBuf, BenchError> {
    fonts();
    let fail = failed(file);
    let root = BitMapBackend::new(file, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let values = report.latencies.iter().flat_map(|l| l.curve.iter().map(|p| p.1)).filter(|v| *v > 0.0);
    let (lo, hi) = values.fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if hi > 0.0 { (lo / 1.5, hi * 1.5) } else { (0.001, 1.0) };
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{}: latency distribution ({})", report.scenario, report.stores), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..MAX_X + 0.1, (lo..hi).log_scale())
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&|x| nines_label(*x))
        .y_desc("latency (ms, log scale)")
        .x_desc("percentile")
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, l) in report.latencies.iter().enumerate() {
        let color = palette(i);
        let points: Vec<(f64, f64)> = l.curve.iter().map(|&(q, ms)| (nines(q), ms.max(lo))).collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(format!("{} (p99 {:.2} ms)", l.name, l.summary.p99_ms))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    if !report.latencies.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(file.to_path_buf())
}

/// Throughput per second (with the main baseline as a flat line) above RSS over time.
pub fn throughput(report: &ScenarioReport, file: &Path) -> Result<PathBuf, BenchError> {
    fonts();
    let fail = failed(file);
    let root = BitMapBackend::new(file, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (top, bottom) = root.split_vertically(SIZE.1 * 3 / 5);
    let t_max = report.samples.iter().map(|s| s.t_s).fold(1.0f64, f64::max);
    let baseline = report.ratios.iter().find(|r| r.unit == "MB/s").map(|r| (r.name.clone(), r.baseline));
    let mb_max = report
        .samples
        .iter()
        .map(|s| s.mb_s)
        .chain(baseline.iter().map(|b| b.1))
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&top)
        .caption(
            format!("{}: throughput and RSS over time ({})", report.scenario, report.stores),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_max, 0f64..mb_max * 1.15)
        .map_err(|e| fail(&e))?;
    chart.configure_mesh().y_desc("MB/s").draw().map_err(|e| fail(&e))?;
    let ours = palette(0);
    chart
        .draw_series(LineSeries::new(report.samples.iter().map(|s| (s.t_s, s.mb_s)), ours.stroke_width(2)))
        .map_err(|e| fail(&e))?
        .label(format!("{} per second", report.scenario))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], ours.stroke_width(2)));
    if let Some((name, mb)) = baseline {
        let gray = RGBColor(0x70, 0x70, 0x70);
        chart
            .draw_series(LineSeries::new([(0.0, mb), (t_max, mb)], gray.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(format!("baseline of \"{name}\": {mb:.0} MB/s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], gray.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;

    let rss: Vec<(f64, f64)> = report.samples.iter().filter_map(|s| s.rss_mib.map(|r| (s.t_s, r))).collect();
    let rss_max = rss.iter().map(|p| p.1).fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_max, 0f64..rss_max * 1.15)
        .map_err(|e| fail(&e))?;
    chart.configure_mesh().y_desc("RSS (MiB)").x_desc("seconds").draw().map_err(|e| fail(&e))?;
    chart.draw_series(LineSeries::new(rss, palette(3).stroke_width(2))).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(file.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_axis() {
        assert!((nines(0.5) - std::f64::consts::LOG10_2).abs() < 1e-9);
        assert!((nines(0.99) - 2.0).abs() < 1e-9);
        assert_eq!(nines(1.0), MAX_X);
        assert_eq!(nines(0.99999), 3.0);
        assert_eq!(nines_label(1.0), "p90");
        assert_eq!(nines_label(3.0), "p99.9");
        assert_eq!(nines_label(0.0), "p0");
        assert_eq!(nines_label(MAX_X), "max");
        assert_eq!(nines_label(1.5), "");
    }
}
