//! SVG charts (plotters): requests/s grouped by server and concurrency, and p99 on a log scale,
//! one of each per connection mode.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::cells::{Metrics, mode_name};
use super::{BenchArgs, Cell, Outcome, outcome};

const SIZE: (u32, u32) = (1100, 520);

fn palette(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    COLORS[i % COLORS.len()]
}

fn metrics<'a>(
    results: &'a [(Cell, Outcome)],
    label: &str,
    c: usize,
    keepalive: bool,
) -> Option<&'a Metrics> {
    match outcome(results, label, c, keepalive)? {
        Outcome::Ran(m) => Some(m),
        Outcome::Failed(_) => None,
    }
}

fn mode_caption(keepalive: bool) -> &'static str {
    if keepalive {
        "keep-alive"
    } else {
        "new connection per request"
    }
}

/// The x axis' label: the name of the category at a whole x, none between them.
fn category_label<T>(x: f64, categories: &[T], name: impl Fn(&T) -> String) -> String {
    let i = x.round();
    if (x - i).abs() < 1e-6 && i >= 0.0 {
        categories.get(i as usize).map(name).unwrap_or_default()
    } else {
        String::new()
    }
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e:?}")
}

/// Writes the charts; returns their paths.
pub fn render(out: &Path, bench: &BenchArgs, results: &[(Cell, Outcome)]) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for &keepalive in &bench.keepalive {
        let path = out.join(format!("throughput-{}.svg", mode_name(keepalive)));
        throughput_chart(&path, bench, results, keepalive)?;
        paths.push(path);
        let path = out.join(format!("p99-{}.svg", mode_name(keepalive)));
        p99_chart(&path, bench, results, keepalive)?;
        paths.push(path);
    }
    Ok(paths)
}

fn throughput_chart(
    path: &Path,
    bench: &BenchArgs,
    results: &[(Cell, Outcome)],
    keepalive: bool,
) -> Result<()> {
    let servers: Vec<&str> = bench.servers.iter().map(|s| s.label).collect();
    let max_rps = results
        .iter()
        .filter_map(|(c, o)| match o {
            Outcome::Ran(m) if c.keepalive == keepalive => Some(m.rps),
            _ => None,
        })
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let title = format!(
        "requests/s, {} (server CPU 1, client CPU 0)",
        mode_caption(keepalive)
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..servers.len() as f64 - 0.5, 0f64..max_rps * 1.1)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(servers.len() * 2 + 1)
        .x_label_formatter(&|x| category_label(*x, &servers, |s| s.to_string()))
        .y_desc("requests/s")
        .draw()
        .map_err(plot_err)?;
    let levels = bench.concurrency.len().max(1);
    let width = 0.8 / levels as f64;
    for (li, &c) in bench.concurrency.iter().enumerate() {
        let color = palette(li);
        let bars: Vec<Rectangle<(f64, f64)>> = servers
            .iter()
            .enumerate()
            .filter_map(|(si, label)| {
                let m = metrics(results, label, c, keepalive)?;
                let x0 = si as f64 - 0.4 + li as f64 * width;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.9, m.rps)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(plot_err)?
            .label(format!("c={c}"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

fn p99_chart(
    path: &Path,
    bench: &BenchArgs,
    results: &[(Cell, Outcome)],
    keepalive: bool,
) -> Result<()> {
    let levels = &bench.concurrency;
    let p99s_ms = results.iter().filter_map(|(c, o)| match o {
        Outcome::Ran(m) if c.keepalive == keepalive && m.p99_us > 0.0 => Some(m.p99_us / 1000.0),
        _ => None,
    });
    let (lo, hi) = p99s_ms.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if hi > 0.0 {
        (lo / 2.0, hi * 2.0)
    } else {
        (0.1, 10.0)
    };
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let title = format!("p99 latency (ms, log scale), {}", mode_caption(keepalive));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.3f64..levels.len() as f64 - 0.7, (lo..hi).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_labels(levels.len() * 2 + 1)
        .x_label_formatter(&|x| category_label(*x, levels, |c| format!("c={c}")))
        .y_desc("p99 ms")
        .draw()
        .map_err(plot_err)?;
    for (si, server) in bench.servers.iter().enumerate() {
        let color = palette(si);
        let points: Vec<(f64, f64)> = levels
            .iter()
            .enumerate()
            .filter_map(|(li, &c)| {
                let m = metrics(results, server.label, c, keepalive)?;
                (m.p99_us > 0.0).then_some((li as f64, m.p99_us / 1000.0))
            })
            .collect();
        // Dashed look for the second half of the palette cycle keeps 9 servers apart.
        let style = ShapeStyle {
            color: color.to_rgba(),
            filled: true,
            stroke_width: if si < 6 { 2 } else { 4 },
        };
        chart
            .draw_series(LineSeries::new(points.clone(), style))
            .map_err(plot_err)?
            .label(server.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}
