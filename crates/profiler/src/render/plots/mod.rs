//! The report's plots, drawn with plotters into inline SVG strings: the timeline, the latency
//! percentile spectrum, per-CPU interrupts over time, and the off-CPU / run-queue histograms.
//!
//! Text: plotters' SVG backend cannot measure a string; it guesses 0.56 of the font size per
//! byte, less than DejaVu Sans (Debian's sans-serif) takes for a digit (0.64) or most capitals.
//! So legends and labels are drawn here, in boxes sized by `text_width`, a bound no common
//! sans-serif exceeds, and tests/plots.rs measures the real text in Chromium. Text and fonts are
//! in text.rs, numbers as ticks print them in numbers.rs, the highest-p99 interval in spike.rs.

mod numbers;
mod spike;
mod text;

pub use numbers::si;
pub use spike::{interval_label, p99_spike};

use numbers::{seconds, trim};
use spike::spike_label;
use text::{bold, fit, font, pin_fonts, text_width};

use plotters::coord::Shift;
use plotters::prelude::*;
use srvprof_common::hist;

use srvprof_analysis::run_report::{GroupHistograms, RunReport, TimelineRow};

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), String>;

/// Fits the page's 1280 px layout with room to spare; the page scales it down below that.
const WIDTH: u32 = 1180;
/// One timeline panel, and the room the shared time axis takes under the last one.
const PANEL_H: u32 = 150;
const TIME_AXIS_H: u32 = 46;
/// The column right of every timeline panel for its name and legend.
const LEGEND_W: u32 = 200;
/// Left of every plot, for tick labels with their unit ("140k req/s").
const Y_LABELS_W: u32 = 92;
/// Font sizes as rendered, in px.
const LABEL_PX: f64 = 12.0;
const TITLE_PX: f64 = 13.0;
/// plotters' SVG backend writes font-size = size / 1.24.
const PLOTTERS_FONT_SCALE: f64 = 1.24;
/// One legend entry's line.
const LEGEND_LINE: i32 = 18;
/// Matplotlib's "tab10": distinguishable, and legible on white.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const SPIKE: RGBColor = RGBColor(214, 39, 40);

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
    Some(pin_fonts(&svg).replacen("<svg ", "<svg class=\"plot\" ", 1))
}

/// A named series, one value per timeline row.
struct Series {
    name: String,
    values: Vec<f64>,
}

/// One timeline panel: a name, the unit of its y axis' ticks, its series.
struct Panel {
    title: &'static str,
    unit: &'static str,
    series: Vec<Series>,
}

fn series(name: &str, run: &RunReport, f: impl Fn(&TimelineRow) -> f64) -> Series {
    Series {
        name: name.to_string(),
        values: run.timeline.iter().map(f).collect(),
    }
}

/// Per-CPU series of one KernelRow field, CPUs that never saw one left out.
fn per_cpu(
    run: &RunReport,
    field: impl Fn(&srvprof_analysis::interval::KernelRow) -> &Vec<f64>,
) -> Vec<Series> {
    let ncpus = (run.timeline.iter())
        .map(|r| field(&r.server).len())
        .max()
        .unwrap_or(0);
    (0..ncpus)
        .map(|cpu| Series {
            name: format!("CPU {cpu}"),
            values: (run.timeline.iter())
                .map(|r| field(&r.server).get(cpu).copied().unwrap_or(0.0))
                .collect(),
        })
        .filter(|s| s.values.iter().any(|v| *v > 0.0))
        .collect()
}

/// Each interval over [t_s, t_s + duration_s]: t_s is when the interval started.
fn steps(rows: &[TimelineRow], values: &[f64]) -> Vec<(f64, f64)> {
    rows.iter()
        .zip(values)
        .flat_map(|(r, v)| [(r.t_s, *v), (r.t_s + r.duration_s, *v)])
        .collect()
}

fn t_max(run: &RunReport) -> f64 {
    (run.timeline.last())
        .map(|r| r.t_s + r.duration_s)
        .unwrap_or(1.0)
        .max(1e-3)
}

/// Throughput and p99 on top; context switches/s, sys %, NET_RX/s per CPU beneath, one time
/// axis; the interval with the highest p99 shaded, labelled with the top finding.
pub fn timeline(run: &RunReport) -> Option<String> {
    if run.timeline.is_empty() {
        return None;
    }
    let panels = vec![
        Panel {
            title: "throughput",
            unit: "req/s",
            series: vec![series("completed", run, |r| r.throughput_rps)],
        },
        Panel {
            title: "latency",
            unit: "s",
            series: vec![
                series("p99", run, |r| r.p99_us as f64 / 1e6),
                series("p50", run, |r| r.p50_us as f64 / 1e6),
            ],
        },
        Panel {
            title: "context switches",
            unit: "/s",
            series: vec![
                series("voluntary", run, |r| r.server.voluntary_switches_per_s),
                series("involuntary", run, |r| r.server.involuntary_switches_per_s),
            ],
        },
        Panel {
            title: "server CPU",
            unit: "%",
            series: vec![
                series("sys", run, |r| r.server.sys_pct),
                series("user", run, |r| r.server.user_pct),
            ],
        },
        Panel {
            title: "NET_RX softirqs",
            unit: "/s",
            series: per_cpu(run, |r| &r.net_rx_per_s),
        },
    ];
    let axis = "time since measurement started; one step per interval of the table below";
    time_panels(run, &panels, axis, spike_label(run).map(|l| (1, l)))
}

/// NET_RX, NET_TX softirqs and hardware interrupts per second, per CPU, over time.
pub fn interrupts(run: &RunReport) -> Option<String> {
    if run.timeline.is_empty() {
        return None;
    }
    let panels = [
        Panel {
            title: "NET_RX softirqs",
            unit: "/s",
            series: per_cpu(run, |r| &r.net_rx_per_s),
        },
        Panel {
            title: "NET_TX softirqs",
            unit: "/s",
            series: per_cpu(run, |r| &r.net_tx_per_s),
        },
        Panel {
            title: "hardirqs",
            unit: "/s",
            series: per_cpu(run, |r| &r.hardirqs_per_s),
        },
    ];
    let axis = "time since measurement started; shaded: the interval with the highest p99";
    time_panels(run, &panels, axis, None)
}

/// Panels stacked on one time axis, `axis` named once under the last; the highest-p99 interval
/// shaded in each, and `label` (panel index, lines) boxed over it in one.
fn time_panels(
    run: &RunReport,
    panels: &[Panel],
    axis: &str,
    label: Option<(usize, Vec<String>)>,
) -> Option<String> {
    let t_max = t_max(run);
    let spike = p99_spike(run).map(|i| &run.timeline[i]);
    let height = PANEL_H * panels.len() as u32 + TIME_AXIS_H;
    render(WIDTH, height, |root| {
        let mut rest = root.clone();
        for (i, panel) in panels.iter().enumerate() {
            let last = i + 1 == panels.len();
            let (area, below) = if last {
                (rest.clone(), rest.clone())
            } else {
                rest.split_vertically(PANEL_H)
            };
            rest = below;
            let (plot, legend_area) = area.split_horizontally(WIDTH - LEGEND_W);
            let label = label
                .as_ref()
                .filter(|(at, _)| *at == i)
                .map(|(_, l)| l.as_slice());
            time_panel(&plot, run, t_max, panel, spike, label, last.then_some(axis))?;
            legend(&legend_area, panel)?;
        }
        Ok(())
    })
}

fn time_panel(
    area: &Area,
    run: &RunReport,
    t_max: f64,
    panel: &Panel,
    spike: Option<&TimelineRow>,
    label: Option<&[String]>,
    time_axis: Option<&str>,
) -> Drawn {
    let highest = (panel.series.iter())
        .flat_map(|s| s.values.iter().copied())
        .fold(0.0f64, f64::max);
    // Headroom for the label box, so it does not hide the peak it marks.
    let headroom = if label.is_some() { 1.6 } else { 1.1 };
    let y_max = if highest > 0.0 {
        highest * headroom
    } else {
        1.0
    };
    let mut chart = ChartBuilder::on(area)
        // Room between one panel's lowest tick label and the next one's highest.
        .margin_top(16)
        .margin_right(16)
        .x_label_area_size(if time_axis.is_some() { TIME_AXIS_H } else { 0 })
        .y_label_area_size(Y_LABELS_W)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)
        .map_err(err)?;
    let y_fmt = |v: &f64| si(*v, panel.unit);
    let x_fmt = |t: &f64| seconds(*t);
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(12)
        .y_labels(4)
        .y_label_formatter(&y_fmt)
        .x_label_formatter(&x_fmt)
        .label_style(font(LABEL_PX))
        .axis_desc_style(font(LABEL_PX));
    if let Some(desc) = time_axis {
        mesh.x_desc(desc);
    }
    mesh.draw().map_err(err)?;
    if let Some(row) = spike {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(row.t_s, 0.0), (row.t_s + row.duration_s, y_max)],
                SPIKE.mix(0.12).filled(),
            )))
            .map_err(err)?;
    }
    for (i, s) in panel.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                steps(&run.timeline, &s.values),
                color.stroke_width(2),
            ))
            .map_err(err)?;
    }
    if let (Some(row), Some(lines)) = (spike, label) {
        let (xs, _) = chart.plotting_area().get_pixel_range();
        let box_w = lines
            .iter()
            .map(|l| text_width(l, LABEL_PX))
            .fold(0.0, f64::max) as i32
            + 12;
        let box_h = LEGEND_LINE * lines.len() as i32 + 8;
        let px_of = |t: f64| xs.start as f64 + t / t_max * (xs.end - xs.start) as f64;
        let centre = px_of(row.t_s + row.duration_s / 2.0) as i32;
        let left = (centre - box_w / 2).clamp(xs.start + 2, (xs.end - box_w - 2).max(xs.start));
        let t_left = (left - xs.start) as f64 / (xs.end - xs.start) as f64 * t_max;
        let corner = (t_left, y_max);
        let frame = EmptyElement::at(corner)
            + Rectangle::new([(0, 3), (box_w, 3 + box_h)], WHITE.mix(0.9).filled())
            + Rectangle::new([(0, 3), (box_w, 3 + box_h)], SPIKE.stroke_width(1));
        chart.plotting_area().draw(&frame).map_err(err)?;
        for (k, line) in lines.iter().enumerate() {
            let text = EmptyElement::at(corner)
                + Text::new(
                    line.clone(),
                    (6, 8 + LEGEND_LINE * k as i32),
                    font(LABEL_PX).color(&BLACK),
                );
            chart.plotting_area().draw(&text).map_err(err)?;
        }
    }
    Ok(())
}

/// A panel's name over its series' colours and names, in a box as wide as the legend column;
/// series that do not fit are counted in a last line.
fn legend(area: &Area, panel: &Panel) -> Drawn {
    let (w, h) = area.dim_in_pixel();
    let room = ((h as i32 - 44) / LEGEND_LINE).max(1) as usize;
    let mut entries: Vec<(String, Option<RGBColor>)> = (panel.series.iter().enumerate())
        .map(|(i, s)| (s.name.clone(), Some(COLORS[i % COLORS.len()])))
        .collect();
    if entries.is_empty() {
        entries.push(("none recorded".into(), None));
    }
    if entries.len() > room {
        let more = entries.len() - (room - 1);
        entries.truncate(room - 1);
        entries.push((format!("+{more} more"), None));
    }
    let swatch = 28;
    // Level with the top of the plot beside it.
    let (x0, y0) = (6, 16);
    // One width for every panel's box; a name too long for it is cut, never left to overflow.
    let box_w = w as i32 - x0 - 8;
    let room_px = (box_w - 16) as f64;
    // The unit is on every tick.
    let title = fit(panel.title, TITLE_PX * 1.1, room_px);
    let entries: Vec<(String, Option<RGBColor>)> = (entries.into_iter())
        .map(|(name, c)| {
            let room = room_px - if c.is_some() { swatch as f64 } else { 0.0 };
            (fit(&name, LABEL_PX, room), c)
        })
        .collect();
    let box_h = 28 + LEGEND_LINE * entries.len() as i32;
    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + box_w, y0 + box_h)],
        RGBColor(250, 250, 250).filled(),
    ))
    .map_err(err)?;
    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + box_w, y0 + box_h)],
        RGBColor(180, 180, 180).stroke_width(1),
    ))
    .map_err(err)?;
    area.draw(&Text::new(
        title,
        (x0 + 8, y0 + 6),
        bold(TITLE_PX).color(&BLACK),
    ))
    .map_err(err)?;
    for (k, (name, color)) in entries.iter().enumerate() {
        let y = y0 + 28 + LEGEND_LINE * k as i32;
        let mut x = x0 + 8;
        if let Some(color) = color {
            area.draw(&PathElement::new(
                vec![(x, y + 7), (x + swatch - 8, y + 7)],
                color.stroke_width(3),
            ))
            .map_err(err)?;
            x += swatch;
        }
        area.draw(&Text::new(
            name.clone(),
            (x, y),
            font(LABEL_PX).color(&BLACK),
        ))
        .map_err(err)?;
    }
    Ok(())
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
                (p.value_us.max(1)) as f64 / 1e6,
            )
        })
        .collect();
    if points.len() < 2 {
        return None;
    }
    let x_max = points.iter().map(|p| p.0).fold(10.0, f64::max);
    let y_max = points.iter().map(|p| p.1).fold(1e-6, f64::max) * 2.0;
    let y_min = points
        .iter()
        .map(|p| p.1)
        .fold(f64::MAX, f64::min)
        .max(1e-6)
        / 2.0;
    render(WIDTH, 360, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .margin_right(30)
            .x_label_area_size(46)
            .y_label_area_size(Y_LABELS_W)
            .build_cartesian_2d((1f64..x_max).log_scale(), (y_min..y_max).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("percentile (log scale: each step right, ten times rarer)")
            .x_label_formatter(&|x| format!("{} %", trim(100.0 * (1.0 - 1.0 / x))))
            .y_label_formatter(&|y| si(*y, "s"))
            .label_style(font(LABEL_PX))
            .axis_desc_style(font(LABEL_PX))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                COLORS[0].stroke_width(2),
            ))
            .map_err(err)?;
        Ok(())
    })
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
    render(WIDTH, 260 * rows as u32, |root| {
        for (area, (title, h)) in root.split_evenly((rows, 2)).iter().zip(&panels) {
            // Seconds, so the ticks read "10 µs", "1 ms".
            let bars: Vec<(f64, f64, u64)> = h
                .slots
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(slot, n)| {
                    let lo = hist::slot_lower_bound(slot as u32).max(1) as f64 / 1e9;
                    let hi = (hist::slot_upper_bound(slot as u32) as f64 / 1e9).max(lo * 1.01);
                    (lo, hi, *n)
                })
                .collect();
            let x_min = bars.iter().map(|b| b.0).fold(f64::MAX, f64::min).max(1e-9);
            let x_max = bars
                .iter()
                .map(|b| b.1)
                .fold(0.0, f64::max)
                .max(x_min * 10.0);
            let y_max = bars.iter().map(|b| b.2).max().unwrap_or(1) as f64 * 1.1;
            let mut chart = ChartBuilder::on(area)
                .margin(8)
                .margin_right(24)
                .caption(title.as_str(), bold(TITLE_PX))
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d((x_min..x_max).log_scale(), 0f64..y_max)
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc("duration")
                .x_labels(6)
                .y_labels(5)
                .x_label_formatter(&|x| si(*x, "s"))
                .y_label_formatter(&|y| si(*y, ""))
                .label_style(font(LABEL_PX))
                .axis_desc_style(font(LABEL_PX))
                .draw()
                .map_err(err)?;
            chart
                .draw_series(bars.iter().map(|&(lo, hi, n)| {
                    Rectangle::new([(lo, 0.0), (hi, n as f64)], COLORS[0].mix(0.6).filled())
                }))
                .map_err(err)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interval_is_drawn_from_its_start_and_the_spike_is_the_first_highest_p99() {
        let row = |t_s: f64, p99_us: u64| TimelineRow {
            t_s,
            duration_s: 0.9999,
            p99_us,
            ..Default::default()
        };
        let run = RunReport {
            timeline: vec![row(0.0003, 900), row(1.0002, 4000), row(2.0001, 4000)],
            ..Default::default()
        };
        let drawn = steps(&run.timeline, &[1.0, 2.0, 3.0]);
        assert_eq!(drawn[0], (0.0003, 1.0));
        assert!((drawn[1].0 - 1.0002).abs() < 1e-9 && drawn[1].1 == 1.0);
        assert_eq!(drawn[2], (1.0002, 2.0));
        assert_eq!(p99_spike(&run), Some(1));
        assert_eq!(interval_label(&run.timeline[1]), "1.0–2.0");
        assert_eq!(
            spike_label(&run).unwrap(),
            ["highest p99: 4 ms (1.0–2.0 s)"]
        );
        let quiet = RunReport {
            timeline: vec![row(0.0, 0)],
            ..Default::default()
        };
        assert_eq!(p99_spike(&quiet), None);
    }
}
