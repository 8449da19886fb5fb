//! Stacks, flamegraphs and report.html against processes whose stacks are known by construction
//! (servers/busy-thread), and report.html rendered by a real browser (headless Chromium).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use srvprof_integration::*;

/// (frames, value) per line of a folded file.
fn thread_named(pid: u32, comm: &str) -> u32 {
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = entry
            .unwrap()
            .file_name()
            .to_string_lossy()
            .parse()
            .unwrap();
        let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap();
        if name.trim() == comm {
            return tid;
        }
    }
    panic!("no thread {comm} in {pid}");
}

#[test]
fn busy_thread_spin_is_the_hottest_leaf_and_block_wait_is_off_cpu_for_its_wall_time() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "0"]);
    let busy = start_busy_thread(&["--spin-fn", "--block-fn", "--seconds", "60", "--cpus", "1"]);
    let spin_tid = thread_named(busy.pid(), "srvprof-spin");
    let started = Instant::now();
    // The spinner's CPU time by the kernel's account, read when srvprof says its probes are attached
    // and when it reads the stacks: exactly the window the stacks were sampled in.
    let dir = fresh_run_dir("busy-thread");
    let mut child = RunArgs::pid(busy.pid())
        .args(&["--url", &nginx.url()])
        .load(4, "4s", "1s")
        // The load and its loopback softirqs stay on CPU 0 with nginx: samples taken in softirq
        // context on the spinner's CPU would be charged to it, and schedstat excludes interrupt
        // time, so the comparison below would measure interrupts, not the sampler.
        .args(&["--cpus", "0"])
        .out(&dir)
        .spawn();
    let mut stderr_lines = std::io::BufReader::new(child.stderr.take().unwrap());
    let (mut cpu_at_attach, mut cpu_at_read, mut stderr) = (None, None, String::new());
    let (mut steal_at_attach, mut steal_at_read) = (0.0, 0.0);
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut stderr_lines, &mut line).unwrap() == 0 {
            break;
        }
        if line.contains("probes attached") {
            cpu_at_attach = Some(proc_schedstat(busy.pid(), spin_tid).0);
            steal_at_attach = cpu1_steal_s();
        }
        if line.contains("reading stacks") {
            cpu_at_read = Some(proc_schedstat(busy.pid(), spin_tid).0);
            steal_at_read = cpu1_steal_s();
        }
        stderr.push_str(&line);
    }
    let status = child.wait().unwrap();
    let wall = started.elapsed();
    let spin_cpu_s = match (cpu_at_attach, cpu_at_read) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e9,
        _ => panic!("srvprof did not announce attach and stack reading: {stderr}"),
    };
    assert!(status.success(), "{stderr}");

    let oncpu = folded(&dir, "oncpu-server.folded");
    let mut by_leaf: BTreeMap<&str, u64> = BTreeMap::new();
    for (frames, n) in &oncpu {
        *by_leaf.entry(frames.last().unwrap()).or_default() += n;
    }
    let (leaf, samples) = by_leaf.iter().max_by_key(|(_, n)| **n).unwrap();
    assert_eq!(*leaf, "srvprof_busy_spin", "{by_leaf:?}");
    // 99 samples per second the spinning thread ran, by the kernel's own account (schedstat, read
    // at the start and end of the sampled window).
    let spin_samples: u64 = oncpu
        .iter()
        .filter(|(f, _)| f[0] == "srvprof-spin")
        .map(|(_, n)| n)
        .sum();
    let sampled_s = spin_samples as f64 / 99.0;
    // The cpu-clock timer runs on the CPU's clock, schedstat on the task's: time the hypervisor
    // stole from CPU 1 (this is a shared VM) is sampled as the spinner but not charged to it.
    let stolen_s = steal_at_read - steal_at_attach;
    eprintln!(
        "on-CPU samples of the spinner: {sampled_s:.2} s sampled, {spin_cpu_s:.2} s by schedstat, {stolen_s:.2} s stolen"
    );
    assert!(
        sampled_s >= 0.8 * spin_cpu_s && sampled_s <= 1.15 * spin_cpu_s + stolen_s && *samples > 50,
        "{spin_samples} samples ({samples} in srvprof_busy_spin) for {spin_cpu_s:.2} s on CPU, {stolen_s:.2} s stolen"
    );
    // The run folder's standalone flamegraph: inferno's script to zoom and search, the stacks'
    // sample count in its subtitle, the spinning function drawn.
    let svg = std::fs::read_to_string(dir.join("flamegraph-oncpu-server.svg")).unwrap();
    let total: u64 = oncpu.iter().map(|(_, n)| n).sum();
    for part in [
        "function zoom(",
        "function search(",
        "server: on-CPU stacks",
        &format!("{total} cpu-clock samples"),
        "srvprof_busy_spin",
    ] {
        assert!(svg.contains(part), "{part} in flamegraph-oncpu-server.svg");
    }
    assert!(dir.join("flamegraph-offcpu-server.svg").exists());
    let spin_stack = &oncpu.iter().max_by_key(|(_, n)| *n).unwrap().0;
    assert_eq!(
        spin_stack,
        &[
            "srvprof-spin",
            "clone3",
            "start_thread",
            "spin_main",
            "srvprof_busy_spin"
        ],
        "stack of the spinning thread, unwound from CFI to clone3 (the frame-pointer walk stopped at start_thread)"
    );

    let offcpu = folded(&dir, "offcpu-server.folded");
    let blocked_us: u64 = offcpu
        .iter()
        .filter(|(f, _)| f[0] == "srvprof-block" && f.iter().any(|x| x == "srvprof_block_wait"))
        .map(|(_, us)| us)
        .sum();
    // Off-CPU from attach to the end of the run: at least warmup + duration, at most srvprof's wall time.
    let lower_us = 5_000_000.0 * 0.9;
    assert!(
        blocked_us as f64 >= lower_us && blocked_us as f64 <= wall.as_micros() as f64,
        "srvprof_block_wait off-CPU {blocked_us} us, srvprof ran {wall:?}"
    );
    // The blocked thread's own stack names its blocking function below the poll syscall.
    let top = offcpu
        .iter()
        .filter(|(f, _)| f[0] == "srvprof-block")
        .max_by_key(|(_, n)| *n)
        .unwrap();
    assert_eq!(
        &top.0[1..5],
        ["clone3", "start_thread", "block_main", "srvprof_block_wait"]
    );
    assert!(
        top.0
            .iter()
            .any(|f| f.contains("poll") && f.ends_with("_[k]")),
        "{:?}",
        top.0
    );
    // Both flamegraphs are in the page.
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("srvprof-report"));
    assert!(html.contains("srvprof_busy_spin") && html.contains("srvprof_block_wait"));
}

#[test]
fn report_html_of_an_nginx_run_renders_in_a_browser_with_every_figure() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let run = RunArgs::pid(nginx.pid())
        .load(20, "3s", "1s")
        .args(&["--cpus", "0"])
        .run_ok("report-html");
    assert!(run["load"]["completed"].as_u64().unwrap() > 0);
    let dir = run_dir("report-html");
    let on = folded(&dir, "oncpu-server.folded");
    assert!(on.iter().any(|(f, _)| f[0].starts_with("nginx")), "{on:?}");

    // `srvprof report DIR` re-renders the page from run.json and the folded files alone.
    std::fs::remove_file(dir.join("report.html")).unwrap();
    assert_success(
        &Command::new(srvprof_bin())
            .arg("report")
            .arg(&dir)
            .output()
            .unwrap(),
    );
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("srvprof-report"));
    assert!(!html.contains("src=\"http"), "fetches from the network");
    // The flamegraphs, each in an iframe of its own with inferno's script; the plots inline:
    // timeline, spectrum, histograms, interrupts.
    let frames = html.matches("<iframe class=\"flamegraph\"").count();
    assert!(frames >= 2, "{frames} flamegraphs in report.html");
    let outside_frames: String = html
        .split("<iframe")
        .enumerate()
        .map(|(i, part)| {
            if i == 0 {
                part
            } else {
                part.split_once("</iframe>").map_or("", |(_, rest)| rest)
            }
        })
        .collect();
    assert!(
        !outside_frames.contains("<script"),
        "the page itself runs no script"
    );
    let plots_in_file = outside_frames.matches("<svg").count();
    assert!(plots_in_file >= 4, "{plots_in_file} plots in report.html");

    let url = format!("file://{}", dir.join("report.html").display());
    let (dom, log) = chromium(&["--dump-dom"], &url);
    assert_eq!(
        dom.matches("<iframe class=\"flamegraph\"").count(),
        frames,
        "the browser's DOM holds every flamegraph of the file"
    );
    for bad in ["Uncaught", "CONSOLE", "ERR_FILE_NOT_FOUND", "net::ERR"] {
        assert!(!log.contains(bad), "browser said {bad}: {log}");
    }
    page_flamegraph_zooms_and_searches_in_a_browser(&dir.join("report.html"));
    standalone_flamegraph_zooms_and_searches_in_a_browser(&dir.join("flamegraph-oncpu-server.svg"));

    let shot = dir.join("report-screenshot.png");
    let (_, log) = chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1400,3000",
        ],
        &url,
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}): {log}"));
    assert_eq!(&png[1..4], b"PNG");
    // A blank page compresses to a few kB; figures and text make it far larger.
    assert!(png.len() > 100_000, "screenshot of {} bytes", png.len());
    eprintln!("screenshot: {}", shot.display());
}

/// The inferno title of the frame named `name` in a differential SVG: its delta, in percent.
fn differential_delta(svg: &str, name: &str) -> Option<f64> {
    let key = format!("<title>{name} (");
    let at = svg.find(&key)? + key.len();
    let title = &svg[at..at + svg[at..].find("</title>")?];
    title
        .rsplit_once("; ")?
        .1
        .trim_end_matches(')')
        .trim_end_matches('%')
        .parse()
        .ok()
}

/// Two runs of servers/busy-thread whose spinning thread runs srvprof_busy_spin in A and the
/// same loop under another name, srvprof_busy_churn, in B: `srvprof compare A B` says the one
/// grew and the other shrank, and draws it.
#[test]
fn compare_draws_the_function_that_grew_and_the_one_that_shrank() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "0"]);
    let mut dirs = Vec::new();
    for (name, flag) in [("compare-a", "--spin-fn"), ("compare-b", "--spin-alt")] {
        let busy = start_busy_thread(&[flag, "--seconds", "30", "--cpus", "1"]);
        let dir = fresh_run_dir(name);
        let out = RunArgs::pid(busy.pid())
            .args(&["--url", &nginx.url()])
            .load(2, "3s", "0s")
            .args(&["--cpus", "0"])
            .out(&dir)
            .command()
            .output()
            .unwrap();
        assert_success(&out);
        dirs.push(dir);
    }
    // What each run spun in, by its own folded stacks.
    let leaf = |dir: &std::path::Path| {
        let mut by_leaf: BTreeMap<String, u64> = BTreeMap::new();
        for (frames, n) in folded(dir, "oncpu-server.folded") {
            *by_leaf.entry(frames.last().unwrap().clone()).or_default() += n;
        }
        by_leaf.into_iter().max_by_key(|(_, n)| *n).unwrap().0
    };
    assert_eq!(leaf(&dirs[0]), "srvprof_busy_spin");
    assert_eq!(leaf(&dirs[1]), "srvprof_busy_churn");

    let out_dir = fresh_run_dir("compare-out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = Command::new(srvprof_bin())
        .arg("compare")
        .args([&dirs[0], &dirs[1]])
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("server on-CPU:"))
        .unwrap_or_else(|| panic!("no server on-CPU line: {text}"));
    assert!(
        line.contains("grew most srvprof_busy_churn")
            && line.contains("shrank most srvprof_busy_spin"),
        "{line}"
    );
    let grown =
        std::fs::read_to_string(out_dir.join("flamegraph-compare-oncpu-server.svg")).unwrap();
    let shrunk =
        std::fs::read_to_string(out_dir.join("flamegraph-compare-oncpu-server-shrunk.svg"))
            .unwrap();
    let (churn, spin) = (
        differential_delta(&grown, "srvprof_busy_churn").expect("churn in B's graph"),
        differential_delta(&shrunk, "srvprof_busy_spin").expect("spin in A's graph"),
    );
    eprintln!("srvprof_busy_churn {churn:+.2}% in B's graph, srvprof_busy_spin {spin:+.2}% in A's");
    // The spinner is most of each run's server samples (the rest: the main thread, the load's
    // softirqs): most of the width moved from one function to the other.
    assert!(churn > 50.0 && spin < -50.0, "{churn} {spin}");
}

/// Each function's share of a diff-folded file's before and after columns (`stack before after`),
/// counted once per stack.
fn diff_shares(text: &str) -> BTreeMap<String, (f64, f64)> {
    let (mut by_name, mut totals) = (BTreeMap::<String, (u64, u64)>::new(), (0u64, 0u64));
    for line in text.lines() {
        let mut fields = line.rsplitn(3, ' ');
        let after: u64 = fields.next().unwrap().parse().unwrap();
        let before: u64 = fields.next().unwrap().parse().unwrap();
        let stack = fields.next().unwrap();
        totals = (totals.0 + before, totals.1 + after);
        let names: std::collections::BTreeSet<&str> = stack.split(';').collect();
        for name in names {
            let e = by_name.entry(name.to_string()).or_default();
            *e = (e.0 + before, e.1 + after);
        }
    }
    by_name
        .into_iter()
        .map(|(k, (b, a))| {
            (
                k,
                (
                    b as f64 / totals.0.max(1) as f64,
                    a as f64 / totals.1.max(1) as f64,
                ),
            )
        })
        .collect()
}

/// servers/threaded spins 2 ms per request in slow_path() from 3 s after its first request for
/// 2 s, and is fast otherwise: the run's slowest intervals are those seconds, and what the
/// server ran more in them is slow_path, by construction.
#[test]
fn the_slowest_intervals_differential_shows_the_function_that_ran_only_in_them() {
    require_root();
    let server = Server::start(
        "threaded",
        &[
            "--cpus",
            "1",
            "--slow-after-ms",
            "3000",
            "--slow-for-ms",
            "2000",
            "--slow-us",
            "2000",
        ],
    );
    let run = RunArgs::pid(server.pid())
        .load(4, "8s", "0s")
        .args(&["--cpus", "0"])
        .run_ok("slowest");
    let dir = run_dir("slowest");
    // The intervals slow_path made slow, by the load generator's own p99.
    let slow: Vec<f64> = run["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["p99_us"].as_u64().unwrap() >= 4_000)
        .map(|r| r["t_s"].as_f64().unwrap())
        .collect();
    eprintln!("intervals with p99 >= 4 ms (4 requests queued on 2 ms spins) start at {slow:?}");
    // Seconds 3 and 4 at least; a busy machine may add another.
    assert!(
        slow.iter().filter(|t| (2.5..5.5).contains(*t)).count() >= 2,
        "{slow:?}"
    );

    // The differential of the slowest intervals against the rest: slow_path gained most.
    let diff = std::fs::read_to_string(dir.join("slowest-oncpu-server.diff.folded"))
        .expect("a differential of the slowest intervals");
    let shares = diff_shares(&diff);
    let (top, (rest, in_slow)) = shares
        .iter()
        .max_by(|a, b| (a.1.1 - a.1.0).total_cmp(&(b.1.1 - b.1.0)))
        .unwrap();
    eprintln!(
        "top gain: {top}: {:.1}% of the slow intervals' samples, {:.1}% of the rest's",
        in_slow * 100.0,
        rest * 100.0
    );
    assert_eq!(top, "slow_path");
    assert!(*in_slow >= 0.5 && *rest <= 0.05, "{in_slow} against {rest}");
    let svg = std::fs::read_to_string(dir.join("flamegraph-slowest-oncpu-server.svg")).unwrap();
    assert!(svg.contains("slow_path") && svg.contains("function zoom("));
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(
        html.contains("What the slowest intervals ran") && html.contains("<code>slow_path</code>")
    );

    // conn_main's 8 KiB buffer is mostly never touched, so its upper pages are not resident:
    // the stack copy goes over them, and the stacks reach the thread's start (clone3 ->
    // start_thread -> conn_main, by construction), as srvprof's unwind figures say too.
    let server_on = folded(&dir, "oncpu-server.folded");
    let with_conn = server_on
        .iter()
        .filter(|(f, _)| f.iter().any(|x| x == "conn_main"));
    let (reach, all) = with_conn.fold((0, 0), |(r, a), (f, v)| {
        let started = f.get(1..3) == Some(&["clone3".to_string(), "start_thread".to_string()]);
        (r + if started { *v } else { 0 }, a + v)
    });
    eprintln!("{reach} of {all} samples in conn_main reach clone3 -> start_thread");
    assert!(
        all > 0 && reach as f64 >= 0.9 * all as f64,
        "{reach} of {all}"
    );
    let quality = run["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["group"] == "server" && q["kind"] == "oncpu")
        .unwrap();
    assert!(quality["reach_start"].as_f64().unwrap() >= 0.9, "{quality}");

    // Every sample was timed; `srvprof report --from --to` draws any window.
    let total = |file: &str| -> u64 { folded(&dir, file).iter().map(|(_, v)| v).sum() };
    let timed = srvprof_integration::timed(&dir, "oncpu-server");
    assert!(
        timed.iter().map(|(_, _, v)| v).sum::<u64>() as f64
            >= 0.95 * total("oncpu-server.folded") as f64
    );
    let share_in = |from: i64, to: i64| -> f64 {
        let (mut all, mut slow_path) = (0u64, 0u64);
        for (at, frames, v) in &timed {
            if *at >= from && *at < to {
                all += v;
                if frames.iter().any(|f| f == "slow_path") {
                    slow_path += v;
                }
            }
        }
        slow_path as f64 / all.max(1) as f64
    };
    assert!(share_in(3200, 4800) >= 0.5 && share_in(0, 2000) == 0.0);
    for (from, to, has) in [("3s", "5s", true), ("0s", "2s", false)] {
        assert_success(
            &Command::new(srvprof_bin())
                .args(["report", "--from", from, "--to", to])
                .arg(&dir)
                .output()
                .unwrap(),
        );
        let svg =
            std::fs::read_to_string(dir.join(format!("flamegraph-oncpu-server-{from}-{to}.svg")))
                .unwrap();
        assert_eq!(svg.contains("slow_path"), has, "{from}-{to}");
    }
    // A window with no stacks is an error that says so.
    let out = Command::new(srvprof_bin())
        .args(["report", "--from", "100s", "--to", "200s"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no stacks fell between 100s and 200s"));
}

/// Opens a copy of the standalone flamegraph `svg` in headless Chromium with a script added that,
/// once inferno's own script has run, searches for the widest frame below the root and then
/// clicks it (its rect, as a user would), and writes what the page then shows on the root
/// element: the "Matched:" share the search reports, at least the frame's own share of the
/// samples, and the clicked frame's width, which zooming makes the full width.
fn standalone_flamegraph_zooms_and_searches_in_a_browser(svg: &std::path::Path) {
    let text = std::fs::read_to_string(svg).unwrap();
    let probe = format!(
        r#"<script type="text/ecmascript"><![CDATA[
window.addEventListener("load", function () {{ setTimeout(function () {{
    {PROBE}(window, document, document.documentElement);
}}, 0); }});
]]></script></svg>"#
    );
    let at = text.rfind("</svg>").expect("the SVG's end");
    let probed = svg.with_file_name("flamegraph-probed.svg");
    std::fs::write(&probed, format!("{}{}", &text[..at], probe)).unwrap();
    let (dom, log) = chromium(&["--dump-dom"], &format!("file://{}", probed.display()));
    check_probe(&dom, &log);
}

/// The probe: in a flamegraph's window `w` and document `d` (inferno's script loaded), searches
/// for the widest frame below the root and then clicks it (its rect, as a user would); writes
/// on `out` the frame, its share, the "Matched:" share the search reports and the clicked
/// frame's width, which zooming makes the full width.
const PROBE: &str = r#"(function (w, d, out) {
    var frames = d.getElementById("frames");
    var total = parseInt(frames.getAttribute("total_samples"));
    var best = null;
    for (var i = 0; i < frames.children.length; i++) {
        var r = frames.children[i].querySelector("rect");
        var fw = parseInt(r.getAttribute("fg:w"));
        if (fw < total && (best === null || fw > parseInt(best.getAttribute("fg:w")))) best = r;
    }
    var name = best.parentNode.querySelector("title").textContent.replace(/ \(.*$/, "");
    out.setAttribute("data-frame", name);
    out.setAttribute("data-frame-share", (100 * parseInt(best.getAttribute("fg:w")) / total).toFixed(1));
    w.search(name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    out.setAttribute("data-matched", d.getElementById("matched").textContent);
    best.dispatchEvent(new w.MouseEvent("click", { bubbles: true }));
    out.setAttribute("data-zoomed-width", best.getAttribute("width"));
})"#;

/// Opens a copy of report.html with a script added that runs the probe in its first flamegraph's
/// frame (same origin: srcdoc) once the page and the frames have loaded.
fn page_flamegraph_zooms_and_searches_in_a_browser(html: &std::path::Path) {
    let text = std::fs::read_to_string(html).unwrap();
    let probe = format!(
        r#"<script>
window.addEventListener("load", function () {{ setTimeout(function () {{
    var f = document.querySelector("iframe.flamegraph");
    {PROBE}(f.contentWindow, f.contentDocument, document.documentElement);
}}, 100); }});
</script></body>"#
    );
    let at = text.rfind("</body>").expect("the page's end");
    let probed = html.with_file_name("report-probed.html");
    std::fs::write(&probed, format!("{}{}", &text[..at], probe)).unwrap();
    let (dom, log) = chromium(&["--dump-dom"], &format!("file://{}", probed.display()));
    check_probe(&dom, &log);
}

/// What the probe wrote: the clicked frame fills the width, the search matched at least its share.
fn check_probe(dom: &str, log: &str) {
    let attr = |name: &str| -> String {
        let key = format!("{name}=\"");
        let at = dom
            .find(&key)
            .unwrap_or_else(|| panic!("no {name} in the page: {log}"))
            + key.len();
        dom[at..at + dom[at..].find('"').unwrap()].to_string()
    };
    let (frame, share) = (attr("data-frame"), attr("data-frame-share"));
    eprintln!(
        "flamegraph: clicked {frame} ({share}% of the samples): width {}, search says {}",
        attr("data-zoomed-width"),
        attr("data-matched")
    );
    let width: f64 = attr("data-zoomed-width")
        .trim_end_matches('%')
        .parse()
        .unwrap();
    assert!((width - 100.0).abs() < 0.01, "zoomed to {width}%");
    let matched: f64 = attr("data-matched")
        .trim_start_matches("Matched: ")
        .trim_end_matches('%')
        .parse()
        .unwrap();
    let share: f64 = share.parse().unwrap();
    // The search matches every frame of that name: at least the clicked one's share.
    assert!(
        matched + 0.1 >= share && matched <= 100.0,
        "matched {matched}%, frame {share}%"
    );
    for bad in ["Uncaught", "ERR_FILE_NOT_FOUND"] {
        assert!(!log.contains(bad), "browser said {bad}: {log}");
    }
}

/// CPU 1's steal time so far (/proc/stat, USER_HZ ticks), seconds.
fn cpu1_steal_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu1 "))
        .expect("a cpu1 line");
    let steal: u64 = line
        .split_whitespace()
        .nth(8)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    steal as f64 / 100.0
}
