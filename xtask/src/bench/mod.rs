//! `cargo xtask bench`: the reference servers of the studies, each pinned to CPU 1 and driven by
//! `srvprof run` from CPU 0, over a grid of concurrency × connection mode. Writes every run's
//! folder, markdown tables (BENCH.md), SVG charts and an HTML index into --out.
//!
//! `cargo xtask bench loadgen` is the load generator's own comparison (loadgen.rs), `bench
//! overhead` what watching costs nginx (overhead.rs), `bench conns` 10,000 held connections
//! (conns.rs), `bench soak` srvprof's memory and output over long runs (soak.rs).

mod cells;
mod charts;
mod conns;
mod host;
mod index;
mod interrupt_time;
mod loadgen;
pub(crate) mod overhead;
mod sample_cost;
mod soak;
mod stats;
mod tables;
mod tail;
mod watchers;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::workspace_root;
pub use cells::{Cell, Outcome};

/// One server configuration of the grid: a label, the `servers/<dir>/run` script, its CPUs and
/// `--workers`.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    pub label: &'static str,
    pub dir: &'static str,
    pub cpus: &'static str,
    pub workers: Option<u32>,
}

/// Every server the full grid runs, in the study's row order. The server gets CPU 1 and the client
/// CPU 0; "all-core" variants on this 2-core machine can only add CPU 0, which they share with the
/// client.
pub const SERVERS: &[ServerSpec] = &[
    ServerSpec {
        label: "nginx-html",
        dir: "nginx-html",
        cpus: "1",
        workers: Some(1),
    },
    ServerSpec {
        label: "nginx-hello",
        dir: "nginx-hello",
        cpus: "1",
        workers: Some(1),
    },
    ServerSpec {
        label: "nginx-hello-4w",
        dir: "nginx-hello",
        cpus: "1",
        workers: Some(4),
    },
    ServerSpec {
        label: "nginx-lua",
        dir: "nginx-lua",
        cpus: "1",
        workers: Some(1),
    },
    ServerSpec {
        label: "go",
        dir: "go",
        cpus: "1",
        workers: None,
    },
    ServerSpec {
        label: "erlang-1core",
        dir: "erlang",
        cpus: "1",
        workers: Some(1),
    },
    ServerSpec {
        label: "erlang-allcore",
        dir: "erlang",
        cpus: "0,1",
        workers: None,
    },
    ServerSpec {
        label: "java-netty",
        dir: "java-netty",
        cpus: "1",
        workers: None,
    },
    ServerSpec {
        label: "rust-hyper",
        dir: "rust-hyper",
        cpus: "1",
        workers: None,
    },
];

const USAGE: &str = "usage: cargo xtask bench [loadgen [--quick]] [overhead [--quick]] \
[conns [--connections N] [--duration 600s]] [soak [--durations 600s,3600s]] [--servers a,b] \
[--concurrency 30,100,1000,5000] [--keepalive on,off] [--duration 10s] [--warmup 2s] [--quick] \
[--render] [--srvprof BIN] [--out DIR]\n  --render: rebuild tables, charts and index from the run folders already in --out\n  \
--srvprof BIN: use this srvprof binary instead of building the release one\n  \
servers: ";

/// The grid and where it goes.
#[derive(Clone, Debug)]
pub struct BenchArgs {
    pub servers: Vec<ServerSpec>,
    pub concurrency: Vec<usize>,
    pub keepalive: Vec<bool>,
    pub duration: Duration,
    pub warmup: Duration,
    pub quick: bool,
    pub render_only: bool,
    /// A srvprof binary to use instead of building target/release/srvprof.
    pub srvprof: Option<PathBuf>,
    pub out: PathBuf,
}

impl BenchArgs {
    fn parse(args: &[String]) -> Result<BenchArgs> {
        let quick = args.iter().any(|a| a == "--quick");
        let mut parsed = BenchArgs {
            servers: pick_servers(if quick {
                "rust-hyper,nginx-hello"
            } else {
                "all"
            })?,
            concurrency: if quick {
                vec![30, 100]
            } else {
                vec![30, 100, 1000, 5000]
            },
            keepalive: vec![true, false],
            duration: Duration::from_secs(if quick { 3 } else { 10 }),
            warmup: Duration::from_secs(if quick { 1 } else { 2 }),
            quick,
            render_only: false,
            srvprof: None,
            out: workspace_root().join("target/bench").join(utc_stamp()),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f, Some(v.to_string())),
                None => (arg.as_str(), None),
            };
            let mut value = || -> Result<String> {
                match &inline {
                    Some(v) => Ok(v.clone()),
                    None => it
                        .next()
                        .cloned()
                        .with_context(|| format!("{flag} needs a value")),
                }
            };
            match flag {
                "--quick" => {}
                "--render" => parsed.render_only = true,
                "--servers" => parsed.servers = pick_servers(&value()?)?,
                "--concurrency" => {
                    parsed.concurrency = value()?
                        .split(',')
                        .map(|c| {
                            c.trim()
                                .parse()
                                .with_context(|| format!("bad concurrency '{c}'"))
                        })
                        .collect::<Result<_>>()?
                }
                "--keepalive" => {
                    parsed.keepalive = value()?
                        .split(',')
                        .map(|k| match k.trim() {
                            "on" => Ok(true),
                            "off" => Ok(false),
                            other => bail!("--keepalive takes on,off, not '{other}'"),
                        })
                        .collect::<Result<_>>()?
                }
                "--duration" => parsed.duration = parse_secs(&value()?)?,
                "--warmup" => parsed.warmup = parse_secs(&value()?)?,
                "--out" => parsed.out = PathBuf::from(value()?),
                "--srvprof" => parsed.srvprof = Some(PathBuf::from(value()?)),
                "-h" | "--help" => bail!("{USAGE}{}", labels()),
                other => bail!("unknown bench option '{other}'\n{USAGE}{}", labels()),
            }
        }
        Ok(parsed)
    }

    /// Every cell of the grid, server by server (each server starts once for all its cells).
    fn cells(&self) -> Vec<Cell> {
        let mut cells = Vec::new();
        for server in &self.servers {
            for &keepalive in &self.keepalive {
                for &connections in &self.concurrency {
                    cells.push(Cell {
                        server: server.clone(),
                        connections,
                        keepalive,
                    });
                }
            }
        }
        cells
    }
}

fn labels() -> String {
    SERVERS
        .iter()
        .map(|s| s.label)
        .collect::<Vec<_>>()
        .join(", ")
}

fn pick_servers(list: &str) -> Result<Vec<ServerSpec>> {
    if list == "all" {
        return Ok(SERVERS.to_vec());
    }
    let mut picked: Vec<ServerSpec> = Vec::new();
    for name in list.split(',').map(str::trim) {
        // A label, or a server directory: "erlang" means both study variants.
        let matches: Vec<&ServerSpec> = match SERVERS.iter().find(|s| s.label == name) {
            Some(spec) => vec![spec],
            None => SERVERS.iter().filter(|s| s.dir == name).collect(),
        };
        if matches.is_empty() {
            bail!("unknown server '{name}'; known: {}", labels());
        }
        for spec in matches {
            if !picked.iter().any(|p| p.label == spec.label) {
                picked.push(spec.clone());
            }
        }
    }
    Ok(picked)
}

pub(crate) fn parse_secs(text: &str) -> Result<Duration> {
    let number = text.trim_end_matches('s');
    let secs: f64 = number
        .parse()
        .with_context(|| format!("'{text}' is not a duration in seconds, e.g. 10s"))?;
    Ok(Duration::from_secs_f64(secs))
}

/// Writes a bench's table to DIR/results.md and prints it.
fn write_results(dir: &Path, bench: &str, table: &str) -> Result<()> {
    let path = dir.join("results.md");
    std::fs::write(&path, table).with_context(|| format!("writing {}", path.display()))?;
    println!("{table}");
    eprintln!("bench {bench}: wrote {}", path.display());
    Ok(())
}

/// `cargo xtask bench stalls`: tests/stalls.rs, which hold on a quiet host only (each patch of
/// kernel text waits for the other vCPU), run as the tests they are.
fn run_stalls() -> Result<()> {
    crate::run_cmd(
        std::process::Command::new("cargo")
            .current_dir(crate::workspace_root())
            .args(["build", "--release", "-p", "srvprof", "--bins"]),
    )?;
    crate::run_cmd(
        std::process::Command::new("cargo")
            .current_dir(crate::workspace_root())
            .args([
                "test",
                "-p",
                "srvprof-integration",
                "--test",
                "tests",
                "stalls::",
            ])
            .args(["--", "--ignored", "--test-threads=1"]),
    )
}

/// `cargo xtask bench ...`
pub fn run(args: &[String]) -> Result<()> {
    if args.first().map(String::as_str) == Some("overhead") {
        let quick = args[1..].iter().any(|a| a == "--quick");
        overhead::run(quick)?;
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("samples") {
        return overhead::run_sample_cost();
    }
    if args.first().map(String::as_str) == Some("conns") {
        return conns::run(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("stalls") {
        return run_stalls();
    }
    if args.first().map(String::as_str) == Some("soak") {
        return soak::run(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("loadgen") {
        let quick = args[1..].iter().any(|a| a == "--quick");
        loadgen::run(quick)?;
        return Ok(());
    }
    let bench = BenchArgs::parse(args)?;
    std::fs::create_dir_all(&bench.out)
        .with_context(|| format!("creating {}", bench.out.display()))?;
    let cells = bench.cells();
    let outcomes = if bench.render_only {
        cells
            .iter()
            .map(|c| cells::read_back(&bench.out, c))
            .collect()
    } else {
        run_grid(&bench, &cells)?
    };
    let results: Vec<(Cell, Outcome)> = cells.into_iter().zip(outcomes).collect();
    write_outputs(&bench, &results)?;
    if bench.quick {
        check_every_cell_completed(&results)?;
    }
    Ok(())
}

fn run_grid(bench: &BenchArgs, cells: &[Cell]) -> Result<Vec<Outcome>> {
    let srvprof = match &bench.srvprof {
        Some(path) => path.clone(),
        None => crate::release_srvprof()?,
    };
    let max_connections = bench.concurrency.iter().copied().max().unwrap_or(0);
    cells::ensure_fd_limit(max_connections)?;
    let started = Instant::now();
    let per_cell = bench.duration + bench.warmup + Duration::from_secs(3);
    eprintln!(
        "bench: {} cells, about {} s of load plus server starts; writing {}",
        cells.len(),
        per_cell.as_secs() * cells.len() as u64,
        bench.out.display()
    );
    let mut outcomes = Vec::with_capacity(cells.len());
    // Cells are grouped by server: one server process serves all its cells.
    let mut i = 0;
    while i < cells.len() {
        let spec = &cells[i].server;
        let group: Vec<&Cell> = cells[i..]
            .iter()
            .take_while(|c| c.server.label == spec.label)
            .collect();
        i += group.len();
        outcomes.extend(cells::run_server_cells(&srvprof, bench, spec, &group));
        eprintln!(
            "bench: {} done, {}/{} cells, {:.0} s elapsed",
            spec.label,
            outcomes.len(),
            cells.len(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(outcomes)
}

fn write_outputs(bench: &BenchArgs, results: &[(Cell, Outcome)]) -> Result<()> {
    let markdown = tables::render(bench, results);
    let md_path = bench.out.join("BENCH.md");
    std::fs::write(&md_path, &markdown)
        .with_context(|| format!("writing {}", md_path.display()))?;
    let charts = charts::render(&bench.out, bench, results)?;
    index::write(&bench.out, &markdown, &charts, results)?;
    println!("{markdown}");
    eprintln!(
        "bench: wrote {}, {} and {}",
        md_path.display(),
        charts
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        bench.out.join("index.html").display()
    );
    Ok(())
}

/// CI's assertion: every cell produced a run.json with completed > 0.
fn check_every_cell_completed(results: &[(Cell, Outcome)]) -> Result<()> {
    let bad: Vec<String> = results
        .iter()
        .filter_map(|(cell, outcome)| match outcome {
            Outcome::Ran(m) if m.completed > 0 => None,
            Outcome::Ran(_) => Some(format!(
                "{}: run.json says 0 requests completed",
                cell.name()
            )),
            Outcome::Failed(reason) => Some(format!("{}: {reason}", cell.name())),
        })
        .collect();
    if !bad.is_empty() {
        bail!(
            "bench --quick: {} cell(s) failed:\n  {}",
            bad.len(),
            bad.join("\n  ")
        );
    }
    eprintln!(
        "bench --quick: all {} cells completed requests",
        results.len()
    );
    Ok(())
}

/// YYYY-MM-DD-HHMMSS in UTC, without a date crate.
fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (H. Hinnant), valid for dates after 1970.
    let z = days as i64 + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The outcome of the cell of this server, concurrency and connection mode, if the grid has it.
pub fn outcome<'a>(
    results: &'a [(Cell, Outcome)],
    label: &str,
    connections: usize,
    keepalive: bool,
) -> Option<&'a Outcome> {
    results
        .iter()
        .find(|(cell, _)| {
            cell.server.label == label
                && cell.connections == connections
                && cell.keepalive == keepalive
        })
        .map(|(_, o)| o)
}

/// Relative link from the index to a file in a run folder.
pub fn rel(out: &Path, path: &Path) -> String {
    path.strip_prefix(out).unwrap_or(path).display().to_string()
}
