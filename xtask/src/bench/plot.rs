//! One SVG line chart per criterion group: time against parameter, a line per implementation.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use super::report::{format_nanos, functions_of, parameters_of};
use super::results::Point;

const SIZE: (u32, u32) = (960, 540);
const COLORS: [RGBColor; 8] = [
    RGBColor(0xd6, 0x27, 0x28), // the subject: red
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// An axis: either the values themselves or their base-10 logarithm (for wide ranges).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Axis {
    log: bool,
}

impl Axis {
    /// Logarithmic when all values are positive and span at least `ratio`.
    fn for_values(values: impl Iterator<Item = f64> + Clone, ratio: f64) -> Self {
        let min = values.clone().fold(f64::INFINITY, f64::min);
        let max = values.fold(f64::NEG_INFINITY, f64::max);
        Axis {
            log: min > 0.0 && max / min >= ratio,
        }
    }

    fn map(self, v: f64) -> f64 {
        if self.log { v.log10() } else { v }
    }

    fn unmap(self, v: f64) -> f64 {
        if self.log { 10f64.powf(v) } else { v }
    }

    /// The drawn range of `values`, padded by 5% on each side.
    fn range(self, values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
        let (min, max) = values
            .map(|v| self.map(v))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        let pad = ((max - min) * 0.05).max(if self.log {
            0.05
        } else {
            max.abs() * 0.05 + 1e-9
        });
        // Linear time axes start at zero, so heights compare honestly.
        let low = if self.log { min - pad } else { min.min(0.0) };
        low..max + pad
    }
}

/// Draws `points` of one group into `path` (SVG); `subject` is drawn first, in red, thicker.
pub fn plot(path: &Path, title: &str, points: &[Point], subject: &str) -> anyhow::Result<()> {
    let functions = functions_of(points, subject);
    let parameters = parameters_of(points);
    let numeric = parameters.iter().all(|p| p.parse::<f64>().is_ok());
    let x_of = |parameter: &str| -> f64 {
        if numeric {
            parameter.parse().unwrap_or(0.0)
        } else {
            parameters.iter().position(|p| p == parameter).unwrap_or(0) as f64
        }
    };
    let x_axis = if numeric {
        Axis::for_values(parameters.iter().map(|p| x_of(p)), 20.0)
    } else {
        Axis { log: false }
    };
    let y_axis = Axis::for_values(points.iter().map(|p| p.nanos), 20.0);
    let x_range = if numeric {
        x_axis.range(parameters.iter().map(|p| x_of(p)))
    } else {
        -0.5..parameters.len() as f64 - 0.5
    };
    let y_range = y_axis.range(
        points
            .iter()
            .flat_map(|p| [p.interval.0.max(p.nanos * 0.5), p.interval.1]),
    );
    let per = if points.iter().all(|p| p.per_element) {
        "per element"
    } else {
        "per iteration"
    };

    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    let draw_error = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| draw_error(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, y_range)
        .map_err(|e| draw_error(&e))?;
    let x_label = |v: &f64| -> String {
        if numeric {
            let value = x_axis.unmap(*v);
            if value >= 1000.0 {
                format!("{:.0}k", value / 1000.0)
            } else {
                format!("{value:.0}")
            }
        } else {
            let index = v.round();
            match parameters.get(index as usize) {
                Some(label) if (v - index).abs() < 1e-6 => label.clone(),
                _ => String::new(),
            }
        }
    };
    let y_label = |v: &f64| format_nanos(y_axis.unmap(*v));
    chart
        .configure_mesh()
        .x_labels(if numeric {
            10
        } else {
            parameters.len().max(2) * 4 - 1
        })
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .x_desc(if x_axis.log {
            "parameter (log scale)"
        } else {
            "parameter"
        })
        .y_desc(format!(
            "time {per}{}",
            if y_axis.log { " (log scale)" } else { "" }
        ))
        .draw()
        .map_err(|e| draw_error(&e))?;

    for (index, function) in functions.iter().enumerate() {
        let color = COLORS[index % COLORS.len()];
        let width = if function == subject { 3 } else { 2 };
        let mut series: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| &p.function == function)
            .map(|p| (x_axis.map(x_of(&p.parameter)), y_axis.map(p.nanos)))
            .collect();
        series.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Lines join numeric parameters only; named ones are categories, drawn as points.
        let line = if numeric { series.clone() } else { Vec::new() };
        let radius = if numeric { 3 } else { 6 };
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(width)))
            .map_err(|e| draw_error(&e))?
            .label(function.as_str())
            .legend(move |(x, y)| Circle::new((x + 10, y), radius.min(5), color.filled()));
        chart
            .draw_series(
                series
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), radius, color.filled())),
            )
            .map_err(|e| draw_error(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| draw_error(&e))?;
    root.present().map_err(|e| draw_error(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes() {
        let log = Axis::for_values([10.0, 100_000.0].into_iter(), 20.0);
        assert!(log.log);
        assert!((log.unmap(log.map(1234.0)) - 1234.0).abs() < 1e-9);
        assert!(!Axis::for_values([10.0, 100.0].into_iter(), 20.0).log);
        assert!(!Axis::for_values([0.0, 100.0].into_iter(), 20.0).log);
        let range = Axis { log: false }.range([10.0, 20.0].into_iter());
        assert!(range.start < 10.0 && range.end > 20.0);
    }

    #[test]
    fn draws_every_function() {
        let point = |function: &str, parameter: &str, nanos: f64| Point {
            function: function.into(),
            parameter: parameter.into(),
            nanos,
            interval: (nanos * 0.9, nanos * 1.1),
            per_element: true,
        };
        let dir = std::env::temp_dir().join(format!("xtask-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, points) in [
            (
                "numeric",
                vec![
                    point("ours", "20", 10.0),
                    point("ours", "100000", 12.0),
                    point("peer", "20", 30.0),
                    point("peer", "100000", 900.0),
                ],
            ),
            (
                "named",
                vec![
                    point("ours", "uniform", 10.0),
                    point("peer", "uniform", 20.0),
                    point("ours", "zipf", 5.0),
                ],
            ),
        ] {
            let path = dir.join(format!("{name}.svg"));
            plot(&path, name, &points, "ours").unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            assert!(svg.starts_with("<svg"), "{name}");
            for label in ["ours", "peer", name] {
                assert!(svg.contains(label), "{name}: no {label}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
