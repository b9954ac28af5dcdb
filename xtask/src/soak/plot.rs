//! The soak's plot: xfwd's resident memory and the packets lost per interval over time, the
//! fault windows shaded.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use super::Results;

const SIZE: (u32, u32) = (960, 640);
const RED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const BLUE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const GREEN: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
const SHADE: RGBColor = RGBColor(0xee, 0xee, 0xee);

/// Two stacked charts into `path` (SVG): memory (MiB) above, loss (packets per interval)
/// below, against seconds; intervals whose loss is excused are shaded grey.
pub fn plot(path: &Path, results: &Results) -> anyhow::Result<()> {
    let draw_error = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(&e))?;
    let (upper, lower) = root.split_vertically(SIZE.1 / 2);
    let t_max = results.intervals.last().map_or(1.0, |i| i.t).max(1.0);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let rss_max = results
        .intervals
        .iter()
        .map(|i| mib(i.rss_kib))
        .fold(1.0, f64::max);
    let lost = |i: &super::Interval| i.sent.saturating_sub(i.received) as f64;
    let loss_max = results.intervals.iter().map(lost).fold(1.0, f64::max);
    let shaded = |chart: &mut ChartContext<'_, SVGBackend<'_>, _>, top: f64| {
        let mut previous = 0.0;
        let mut boxes = Vec::new();
        for i in &results.intervals {
            if i.excused {
                boxes.push(Rectangle::new(
                    [(previous, 0.0), (i.t, top)],
                    SHADE.filled(),
                ));
            }
            previous = i.t;
        }
        chart.draw_series(boxes).map(drop)
    };

    let mut memory = ChartBuilder::on(&upper)
        .caption(
            "xfwd memory (MiB): resident (blue), live allocations (green); grey: fault windows",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..t_max, 0.0..rss_max * 1.1)
        .map_err(|e| draw_error(&e))?;
    memory
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MiB")
        .draw()
        .map_err(|e| draw_error(&e))?;
    shaded(&mut memory, rss_max * 1.1).map_err(|e| draw_error(&e))?;
    for instance in 0..=results
        .intervals
        .iter()
        .map(|i| i.instance)
        .max()
        .unwrap_or(0)
    {
        memory
            .draw_series(LineSeries::new(
                results
                    .intervals
                    .iter()
                    .filter(|i| i.instance == instance && i.rss_kib > 0)
                    .map(|i| (i.t, mib(i.rss_kib))),
                BLUE.stroke_width(2),
            ))
            .map_err(|e| draw_error(&e))?;
        memory
            .draw_series(LineSeries::new(
                results
                    .intervals
                    .iter()
                    .filter(|i| i.instance == instance && i.live_kib() > 0)
                    .map(|i| (i.t, mib(i.live_kib()))),
                GREEN.stroke_width(1),
            ))
            .map_err(|e| draw_error(&e))?;
    }

    let mut loss = ChartBuilder::on(&lower)
        .caption("packets lost per one-second interval", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..t_max, 0.0..loss_max * 1.1)
        .map_err(|e| draw_error(&e))?;
    loss.configure_mesh()
        .x_desc("seconds")
        .y_desc("lost")
        .draw()
        .map_err(|e| draw_error(&e))?;
    shaded(&mut loss, loss_max * 1.1).map_err(|e| draw_error(&e))?;
    loss.draw_series(
        results
            .intervals
            .iter()
            .map(|i| Circle::new((i.t, lost(i)), 3, RED.filled())),
    )
    .map_err(|e| draw_error(&e))?;
    root.present().map_err(|e| draw_error(&e))?;
    Ok(())
}
