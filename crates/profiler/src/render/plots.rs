//! The report's plots, drawn with plotters into inline SVG strings: the timeline, the latency
//! percentile spectrum, per-CPU interrupts over time, and the off-CPU / run-queue histograms.

use plotters::coord::Shift;
use plotters::prelude::*;
use srvprof_common::hist;

use srvprof_analysis::run_report::{GroupHistograms, RunReport};

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), String>;
/// A named line: (name, [(x, y)]).
type Series = (String, Vec<(f64, f64)>);

const FONT: (&str, u32) = ("sans-serif", 14);

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Draws into a fresh SVG of `w` x `h` pixels; None if plotters fails.
fn render(w: u32, h: u32, draw: impl FnOnce(&Area) -> Drawn) -> Option<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        draw(&root).ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

fn max_of(values: impl Iterator<Item = f64>) -> f64 {
    let m = values.fold(0.0f64, f64::max);
    if m > 0.0 { m * 1.1 } else { 1.0 }
}

/// One panel of the timeline: named series over seconds since the measured window started.
fn time_panel(
    area: &Area,
    t_max: f64,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    x_desc: &str,
) -> Drawn {
    let y_max = max_of(series.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y)));
    let mut chart = ChartBuilder::on(area)
        .margin(6)
        .x_label_area_size(if x_desc.is_empty() { 22 } else { 40 })
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .y_desc(y_desc)
        .x_desc(x_desc)
        .label_style(("sans-serif", 11))
        .draw()
        .map_err(err)?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)
}

/// Per-CPU series of one IntervalRow field.
fn per_cpu(
    run: &RunReport,
    label: &str,
    field: impl Fn(&srvprof_analysis::interval::IntervalRow) -> &Vec<f64>,
) -> Vec<(String, Vec<(f64, f64)>)> {
    let ncpus = run
        .timeline
        .iter()
        .map(|r| field(&r.server).len())
        .max()
        .unwrap_or(0);
    (0..ncpus)
        .map(|cpu| {
            let points = run
                .timeline
                .iter()
                .map(|r| {
                    (
                        r.t_s + r.duration_s,
                        field(&r.server).get(cpu).copied().unwrap_or(0.0),
                    )
                })
                .collect();
            (format!("{label} CPU {cpu}"), points)
        })
        .collect()
}

fn t_max(run: &RunReport) -> f64 {
    run.timeline
        .last()
        .map(|r| r.t_s + r.duration_s)
        .unwrap_or(1.0)
        .max(1e-3)
}

/// Throughput and p99 on top; context switches/s, sys %, NET_RX/s per CPU beneath, one time axis.
pub fn timeline(run: &RunReport) -> Option<String> {
    if run.timeline.is_empty() {
        return None;
    }
    let t_max = t_max(run);
    let at = |f: &dyn Fn(&srvprof_analysis::run_report::TimelineRow) -> f64| -> Vec<(f64, f64)> {
        run.timeline
            .iter()
            .map(|r| (r.t_s + r.duration_s, f(r)))
            .collect()
    };
    let panels: Vec<(&str, Vec<Series>)> = vec![
        (
            "requests/s",
            vec![("throughput (req/s)".into(), at(&|r| r.throughput_rps))],
        ),
        (
            "latency (ms)",
            vec![
                ("p99 (ms)".into(), at(&|r| r.p99_us as f64 / 1000.0)),
                ("p50 (ms)".into(), at(&|r| r.p50_us as f64 / 1000.0)),
            ],
        ),
        (
            "switches/s",
            vec![
                (
                    "voluntary/s".into(),
                    at(&|r| r.server.voluntary_switches_per_s),
                ),
                (
                    "involuntary/s".into(),
                    at(&|r| r.server.involuntary_switches_per_s),
                ),
            ],
        ),
        (
            "CPU (%)",
            vec![
                ("server sys %".into(), at(&|r| r.server.sys_pct)),
                ("server user %".into(), at(&|r| r.server.user_pct)),
            ],
        ),
        ("NET_RX/s", per_cpu(run, "NET_RX/s", |r| &r.net_rx_per_s)),
    ];
    render(1200, 180 * panels.len() as u32, |root| {
        let areas = root.split_evenly((panels.len(), 1));
        for (i, (area, (y_desc, series))) in areas.iter().zip(&panels).enumerate() {
            // One shared time axis: named once, under the last panel.
            let x_desc = if i + 1 == panels.len() {
                "time (s)"
            } else {
                ""
            };
            time_panel(area, t_max, y_desc, series, x_desc)?;
        }
        Ok(())
    })
}

/// NET_RX, NET_TX softirqs and hardware interrupts per second, per CPU, over time.
pub fn interrupts(run: &RunReport) -> Option<String> {
    if run.timeline.is_empty() {
        return None;
    }
    let t_max = t_max(run);
    let panels = [
        (
            "NET_RX softirqs/s",
            per_cpu(run, "NET_RX/s", |r| &r.net_rx_per_s),
        ),
        (
            "NET_TX softirqs/s",
            per_cpu(run, "NET_TX/s", |r| &r.net_tx_per_s),
        ),
        (
            "hardirqs/s",
            per_cpu(run, "hardirqs/s", |r| &r.hardirqs_per_s),
        ),
    ];
    render(1200, 540, |root| {
        let areas = root.split_evenly((3, 1));
        for (i, (area, (y_desc, series))) in areas.iter().zip(&panels).enumerate() {
            let x_desc = if i == 2 { "time (s)" } else { "" };
            time_panel(area, t_max, y_desc, series, x_desc)?;
        }
        Ok(())
    })
}

/// Latency by percentile, both axes logarithmic: x is 1/(1-p), so 90, 99, 99.9 % are evenly spaced.
pub fn spectrum(run: &RunReport) -> Option<String> {
    let points: Vec<(f64, f64)> = run
        .load
        .spectrum
        .iter()
        .filter(|p| p.percentile < 100.0)
        .map(|p| {
            (
                1.0 / (1.0 - p.percentile / 100.0),
                (p.value_us.max(1)) as f64,
            )
        })
        .collect();
    if points.len() < 2 {
        return None;
    }
    let x_max = points.iter().map(|p| p.0).fold(10.0, f64::max);
    let y_max = points.iter().map(|p| p.1).fold(1.0, f64::max) * 2.0;
    let y_min = points.iter().map(|p| p.1).fold(f64::MAX, f64::min).max(1.0) / 2.0;
    render(1200, 380, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .caption("latency by percentile", FONT)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d((1f64..x_max).log_scale(), (y_min..y_max).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("percentile")
            .y_desc("latency (us)")
            .x_label_formatter(&|x| format!("{}%", trim(100.0 * (1.0 - 1.0 / x))))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                BLUE.stroke_width(2),
            ))
            .map_err(err)?;
        Ok(())
    })
}

fn trim(v: f64) -> String {
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Off-CPU and run-queue histograms (count per log-linear slot), one panel per group and kind.
pub fn histograms(hists: &[GroupHistograms]) -> Option<String> {
    let panels: Vec<(String, &srvprof_analysis::record::NsHistogram)> = hists
        .iter()
        .flat_map(|g| {
            [
                (format!("{} off-CPU time", g.group), &g.offcpu),
                (format!("{} run-queue wait", g.group), &g.runq),
            ]
        })
        .filter(|(_, h)| h.total() > 0)
        .collect();
    if panels.is_empty() {
        return None;
    }
    let rows = panels.len().div_ceil(2);
    render(1200, 260 * rows as u32, |root| {
        for (area, (title, h)) in root.split_evenly((rows, 2)).iter().zip(&panels) {
            let bars: Vec<(f64, f64, u64)> = h
                .slots
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(slot, n)| {
                    let lo = hist::slot_lower_bound(slot as u32).max(1) as f64 / 1000.0;
                    let hi = (hist::slot_upper_bound(slot as u32) as f64 / 1000.0).max(lo * 1.01);
                    (lo, hi, *n)
                })
                .collect();
            let x_min = bars.iter().map(|b| b.0).fold(f64::MAX, f64::min).max(1e-3);
            let x_max = bars
                .iter()
                .map(|b| b.1)
                .fold(0.0, f64::max)
                .max(x_min * 10.0);
            let y_max = bars.iter().map(|b| b.2).max().unwrap_or(1) as f64 * 1.1;
            let mut chart = ChartBuilder::on(area)
                .margin(8)
                .caption(title.as_str(), FONT)
                .x_label_area_size(30)
                .y_label_area_size(60)
                .build_cartesian_2d((x_min..x_max).log_scale(), 0f64..y_max)
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc("duration (us)")
                .y_desc("count")
                .label_style(("sans-serif", 11))
                .draw()
                .map_err(err)?;
            chart
                .draw_series(bars.iter().map(|&(lo, hi, n)| {
                    Rectangle::new([(lo, 0.0), (hi, n as f64)], BLUE.mix(0.6).filled())
                }))
                .map_err(err)?;
        }
        Ok(())
    })
}
