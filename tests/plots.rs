//! report.html's plots as a browser draws them (headless Chromium, the page as a user opens it):
//! every legend and axis text inside its box and inside its SVG, no two texts on top of each
//! other, the timeline's intervals where the timeline table says they are, the highest-p99
//! interval marked with the top finding, and no console error.
//!
//! The run is made up here, a run.json `srvprof report DIR` renders without a kernel: figures
//! chosen to be hard to print (140k req/s, latencies from 180 us to 48 ms, eight CPUs, a finding
//! with a long name), so the test is fast, deterministic and needs no root. Set
//! SRVPROF_PLOTS_RUN_DIR to a folder of a real run (`srvprof run --out DIR`) to check its page
//! instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use srvprof_analysis::finding::{Finding, FindingKind, Severity};
use srvprof_analysis::run_report::{RunReport, TimelineRow};
use srvprof_integration::*;

const CPUS: usize = 8;
const INTERVALS: usize = 8;
/// The interval with the highest p99.
const SPIKE: usize = 5;

/// A run of INTERVALS one-second intervals; each kernel interval starts 0.3 ms after its grid
/// point, as the sampler's do.
fn made_up_run() -> Value {
    let mut run = RunReport {
        tool: "srvprof".into(),
        version: "plots-test".into(),
        ..Default::default()
    };
    run.target.url = "http://127.0.0.1:8080/".into();
    run.target.pids = vec![4242];
    for k in 0..INTERVALS {
        let mut row = TimelineRow {
            t_s: k as f64 + 0.0003,
            duration_s: 0.9999,
            load_t_s: k as f64,
            load_intervals: 1,
            throughput_rps: 140_000.0 - 3_000.0 * k as f64,
            completed: 140_000 - 3_000 * k as u64,
            p50_us: 180 + 10 * k as u64,
            p99_us: if k == SPIKE {
                48_000
            } else {
                1_700 + 50 * k as u64
            },
            client_user_pct: 60.0,
            client_sys_pct: 30.0,
            ..Default::default()
        };
        let s = &mut row.server;
        s.t_s = row.t_s;
        s.duration_s = row.duration_s;
        s.voluntary_switches_per_s = 118_000.0 + 1_000.0 * k as f64;
        s.involuntary_switches_per_s = 2_400.0;
        s.sys_pct = 35.5;
        s.user_pct = 12.25;
        s.net_rx_per_s = (0..CPUS).map(|c| 45_000.0 / (c + 1) as f64).collect();
        s.net_tx_per_s = (0..CPUS).map(|c| 9_000.0 / (c + 1) as f64).collect();
        s.hardirqs_per_s = (0..CPUS).map(|c| 1_500.0 + c as f64).collect();
        run.timeline.push(row);
    }
    run.findings = vec![
        Finding::new(
            FindingKind::NetIrqConcentrated,
            Severity::Warning,
            "NET_RX softirqs ran on CPU 0 for 45 % of the run".into(),
            &[],
        ),
        Finding::new(
            FindingKind::ClientBound,
            Severity::Info,
            "the client".into(),
            &[],
        ),
    ];
    let mut v = serde_json::to_value(&run).unwrap();
    v["load"]["duration_s"] = json!(INTERVALS as f64);
    v["load"]["throughput_rps"] = json!(130_000.0);
    v["load"]["spectrum"] = json!(
        [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999]
            .iter()
            .zip([120, 190, 900, 1_800, 30_000, 47_000, 48_000])
            .map(|(p, us)| json!({"percentile": p, "value_us": us, "count": 1}))
            .collect::<Vec<_>>()
    );
    let mut slots = vec![0u64; 256];
    for (i, slot) in slots.iter_mut().enumerate().skip(40).take(40) {
        *slot = (i as u64 * 37) % 1000 + 1;
    }
    let hist = json!({"slots": slots});
    v["histograms"] = json!(
        ["server", "client"]
            .iter()
            .map(|g| json!({"group": g, "offcpu": hist, "runq": hist}))
            .collect::<Vec<_>>()
    );
    v
}

/// Run once the page has laid out; writes what it measured on the root element. Boxes are the
/// smallest <rect> of the same SVG that holds the text's anchor point (a legend's or a label's
/// frame), else the SVG's own viewport. In the timeline, seconds are read off the time axis's
/// tick labels ("2 s" centred on its tick), so the plot is checked against what it says.
const PROBE: &str = r##"<script>
window.addEventListener("load", function () { setTimeout(function () {
  var root = document.documentElement, problems = [], texts = 0;
  function inside(a, b) {
    return a.left >= b.left - 0.5 && a.right <= b.right + 0.5 && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
  }
  function fmt(r) { return "[" + [r.left, r.top, r.right, r.bottom].map(function (v) { return v.toFixed(1); }).join(",") + "]"; }
  try {
    var svgs = Array.from(document.querySelectorAll("svg.plot"));
    svgs.forEach(function (svg, n) {
      var view = svg.getBoundingClientRect();
      var scale = view.width / svg.viewBox.baseVal.width;
      var rects = Array.from(svg.querySelectorAll("rect")).map(function (r) { return r.getBoundingClientRect(); });
      var boxes = [];
      svg.querySelectorAll("text").forEach(function (t) {
        var s = t.textContent.trim();
        if (!s) return;
        texts++;
        var b = t.getBoundingClientRect();
        var ax = view.left + scale * parseFloat(t.getAttribute("x")), ay = view.top + scale * parseFloat(t.getAttribute("y"));
        var box = view;
        rects.forEach(function (r) {
          if (ax >= r.left && ax <= r.right && ay >= r.top && ay <= r.bottom && r.width * r.height < box.width * box.height) box = r;
        });
        if (!inside(b, view)) problems.push("plot " + n + ": \"" + s + "\" " + fmt(b) + " leaves the SVG " + fmt(view));
        else if (!inside(b, box)) problems.push("plot " + n + ": \"" + s + "\" " + fmt(b) + " leaves its box " + fmt(box));
        boxes.forEach(function (o) {
          var w = Math.min(b.right, o.b.right) - Math.max(b.left, o.b.left), h = Math.min(b.bottom, o.b.bottom) - Math.max(b.top, o.b.top);
          if (w > 1 && h > 1) problems.push("plot " + n + ": \"" + s + "\" overlaps \"" + o.s + "\"");
        });
        boxes.push({ s: s, b: b });
      });
    });
    root.setAttribute("data-plots", svgs.length);
    root.setAttribute("data-texts", texts);
    root.setAttribute("data-problems", problems.join(" | ") || "none");
    // The timeline: seconds per px from two tick labels, then the first step and the band.
    var tl = svgs[0], view = tl.getBoundingClientRect();
    var ticks = Array.from(tl.querySelectorAll("text[text-anchor=middle]")).map(function (t) {
      var m = /^([0-9.]+) s$/.exec(t.textContent.trim());
      var b = t.getBoundingClientRect();
      return m && { t: parseFloat(m[1]), x: (b.left + b.right) / 2 };
    }).filter(function (v) { return v; });
    var a = ticks[0], z = ticks[ticks.length - 1];
    function seconds(x) { return a.t + (x - a.x) * (z.t - a.t) / (z.x - a.x); }
    var scale = view.width / tl.viewBox.baseVal.width;
    var first = tl.querySelector("polyline[stroke-width='2']").points;
    root.setAttribute("data-first-step", [first[0].x, first[1].x].map(function (x) { return seconds(view.left + scale * x).toFixed(2); }).join("-"));
    var band = Array.from(tl.querySelectorAll("rect")).filter(function (r) { return r.getAttribute("fill") !== "#FFFFFF" && r.getAttribute("opacity") === "0.12"; })[0].getBoundingClientRect();
    root.setAttribute("data-band", seconds(band.left).toFixed(2) + "-" + seconds(band.right).toFixed(2));
    root.setAttribute("data-label", Array.from(tl.querySelectorAll("text")).map(function (t) { return t.textContent.trim(); }).filter(function (s) { return s.startsWith("top finding: "); }).join(""));
    var rows = Array.from(document.querySelectorAll("table.timeline tr"));
    root.setAttribute("data-table-first", rows[1].cells[0].textContent);
    root.setAttribute("data-table-spike", document.querySelector("table.timeline tr.spike").cells[0].textContent);
    root.setAttribute("data-table-rows", rows.length - 1);
  } catch (e) {
    root.setAttribute("data-probe-error", String(e));
  }
}, 0); });
</script>"##;

fn attr(dom: &str, name: &str, log: &str) -> String {
    let key = format!("{name}=\"");
    let at = dom
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} on the page: {log}"))
        + key.len();
    dom[at..at + dom[at..].find('"').unwrap()].replace("&quot;", "\"")
}

/// An interval label of the table, "5.0–6.0", as (start, end) seconds.
fn interval(label: &str) -> (f64, f64) {
    let (a, b) = label
        .split_once('–')
        .unwrap_or_else(|| panic!("interval {label:?}"));
    (a.parse().unwrap(), b.parse().unwrap())
}

fn close(label: &str, measured: &str, (a, b): (f64, f64)) {
    let (x, y) = interval(&measured.replacen('-', "–", 1));
    // A pixel of a 1-second interval on an axis of about 900 px is 0.01 s.
    assert!(
        (x - a).abs() < 0.03 && (y - b).abs() < 0.03,
        "{label}: drawn over {x}–{y} s, the table says {a}–{b} s"
    );
}

fn run_folder() -> PathBuf {
    if let Some(dir) = std::env::var_os("SRVPROF_PLOTS_RUN_DIR") {
        return PathBuf::from(dir);
    }
    let dir = fresh_run_dir("plots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("run.json"),
        serde_json::to_string_pretty(&made_up_run()).unwrap(),
    )
    .unwrap();
    // A flamegraph beside the plots: its stylesheet is the page's too.
    std::fs::write(
        dir.join("oncpu-server.folded"),
        "nginx;main;ngx_process_events;epoll_wait 30\nnginx;main;ngx_http_handler;write 70\n",
    )
    .unwrap();
    dir
}

fn report_html(dir: &Path) -> String {
    assert_success(
        &Command::new(srvprof_bin())
            .arg("report")
            .arg(dir)
            .output()
            .unwrap(),
    );
    std::fs::read_to_string(dir.join("report.html")).unwrap()
}

#[test]
fn every_plot_text_fits_its_box_and_the_timeline_matches_its_table_in_a_browser() {
    let dir = run_folder();
    let run: RunReport =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let html = report_html(&dir);
    let at = html.rfind("</body>").expect("the page's end");
    let probed = dir.join("report-probed.html");
    std::fs::write(&probed, format!("{}{PROBE}{}", &html[..at], &html[at..])).unwrap();
    let (dom, log) = chromium(
        &["--dump-dom", "--window-size=1280,2400"],
        &format!("file://{}", probed.display()),
    );
    for bad in ["Uncaught", "CONSOLE", "ERR_FILE_NOT_FOUND", "net::ERR"] {
        assert!(!log.contains(bad), "browser said {bad}: {log}");
    }
    assert!(
        !dom.contains("data-probe-error=\""),
        "{}",
        attr(&dom, "data-probe-error", &log)
    );
    let texts: usize = attr(&dom, "data-texts", &log).parse().unwrap();
    let plots: usize = attr(&dom, "data-plots", &log).parse().unwrap();
    eprintln!(
        "{plots} plots, {texts} texts measured in {}",
        probed.display()
    );
    // Timeline, spectrum, histograms, interrupts, each with its ticks and legends.
    assert_eq!(plots, 4);
    assert!(texts > 60, "{texts} texts");
    assert_eq!(attr(&dom, "data-problems", &log), "none");

    // The table lists every interval; the plot draws the first from where the table says it
    // starts (not at its end), and shades the same highest-p99 interval.
    let rows = &run.timeline;
    assert_eq!(attr(&dom, "data-table-rows", &log), rows.len().to_string());
    let first = attr(&dom, "data-table-first", &log);
    let (start, end) = interval(&first);
    assert!(
        (start - rows[0].t_s).abs() < 0.051
            && (end - rows[0].t_s - rows[0].duration_s).abs() < 0.051,
        "first interval {first}: {rows:?}"
    );
    close(
        "the first interval",
        &attr(&dom, "data-first-step", &log),
        (start, end),
    );
    let spike = (0..rows.len()).fold(0, |best, i| {
        if rows[i].p99_us > rows[best].p99_us {
            i
        } else {
            best
        }
    });
    let spike_label = attr(&dom, "data-table-spike", &log);
    let (a, b) = interval(&spike_label);
    assert!(
        (a - rows[spike].t_s).abs() < 0.051,
        "the table shades {spike_label}, the highest p99 is in interval {spike}"
    );
    close("the p99 spike", &attr(&dom, "data-band", &log), (a, b));
    let expected = (run.findings.first())
        .map(|f| format!("top finding: {}", f.kind.name()))
        .unwrap_or_default();
    assert_eq!(attr(&dom, "data-label", &log), expected);
}
