//! Stacks, flamegraphs and report.html against processes whose stacks are known by construction
//! (servers/busy-thread), and report.html rendered by a real browser (headless Chromium).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
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

fn start_busy_thread(args: &[&str]) -> Server {
    let mut child = spawn_in_own_group(
        Command::new(workspace_root().join("servers/busy-thread/run"))
            .args(args)
            .stdout(Stdio::piped()),
    );
    // It prints `ready` once its threads run (after a build on first use).
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        if line.trim() == "ready" {
            break;
        }
        seen.push(line);
        assert!(
            n > 0 && seen.len() < 100,
            "busy-thread did not start: {seen:?}"
        );
    }
    Server { child, port: 0 }
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

/// Runs headless Chromium with a fresh profile; returns (stdout, stderr).
fn chromium(args: &[&str], url: &str) -> (String, String) {
    let profile = std::env::temp_dir().join(format!("srvprof-chromium-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).unwrap();
    let out = Command::new("/usr/bin/chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run /usr/bin/chromium");
    let _ = std::fs::remove_dir_all(&profile);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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
    assert!(
        !html.contains("http://") || !html.contains("src=\"http"),
        "fetches from the network"
    );
    assert!(!html.contains("<script"), "no script in the page");
    // timeline, spectrum, 4 flamegraphs, histograms, interrupts.
    let svgs_in_file = html.matches("<svg").count();
    assert!(svgs_in_file >= 8, "{svgs_in_file} SVGs in report.html");

    let url = format!("file://{}", dir.join("report.html").display());
    let (dom, log) = chromium(&["--dump-dom"], &url);
    assert_eq!(
        dom.matches("<svg").count(),
        svgs_in_file,
        "the browser's DOM holds every SVG of the file"
    );
    for bad in ["Uncaught", "CONSOLE", "ERR_FILE_NOT_FOUND", "net::ERR"] {
        assert!(!log.contains(bad), "browser said {bad}: {log}");
    }
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

/// Opens a copy of the standalone flamegraph `svg` in headless Chromium with a script added that,
/// once inferno's own script has run, searches for the widest frame below the root and then
/// clicks it (its rect, as a user would), and writes what the page then shows on the root
/// element: the "Matched:" share the search reports, at least the frame's own share of the
/// samples, and the clicked frame's width, which zooming makes the full width.
fn standalone_flamegraph_zooms_and_searches_in_a_browser(svg: &std::path::Path) {
    let text = std::fs::read_to_string(svg).unwrap();
    let probe = r#"<script type="text/ecmascript"><![CDATA[
window.addEventListener("load", function () { setTimeout(function () {
    var root = document.documentElement;
    var frames = document.getElementById("frames");
    var total = parseInt(frames.getAttribute("total_samples"));
    var best = null;
    for (var i = 0; i < frames.children.length; i++) {
        var r = frames.children[i].querySelector("rect");
        var w = parseInt(r.getAttribute("fg:w"));
        if (w < total && (best === null || w > parseInt(best.getAttribute("fg:w")))) best = r;
    }
    var name = best.parentNode.querySelector("title").textContent.replace(/ \(.*$/, "");
    root.setAttribute("data-frame", name);
    root.setAttribute("data-frame-share", (100 * parseInt(best.getAttribute("fg:w")) / total).toFixed(1));
    search(name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    root.setAttribute("data-matched", document.getElementById("matched").textContent);
    best.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    root.setAttribute("data-zoomed-width", best.getAttribute("width"));
}, 0); });
]]></script></svg>"#;
    let at = text.rfind("</svg>").expect("the SVG's end");
    let probed = svg.with_file_name("flamegraph-probed.svg");
    std::fs::write(&probed, format!("{}{}", &text[..at], probe)).unwrap();
    let (dom, log) = chromium(&["--dump-dom"], &format!("file://{}", probed.display()));
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
