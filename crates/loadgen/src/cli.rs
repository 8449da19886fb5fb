//! Command-line options of a load run (everything but the URL) and the `srvprof load` command.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use crate::duration::parse_duration;

use crate::{LoadConfig, LoadError, LoadReport};

#[derive(clap::Args, Clone, Debug, PartialEq)]
#[command(next_help_heading = "Load")]
pub struct LoadArgs {
    /// Concurrent connections.
    #[arg(short = 'c', long = "connections", default_value_t = 50)]
    pub connections: usize,

    /// This host's share of a run split over N client hosts: the I-th of N, counted from 1.
    ///
    /// -c and -n are split as evenly as integers allow; an open loop's arrivals are dealt out,
    /// arrival k to the host with k mod N = I-1 (a --targets list likewise), so the N hosts
    /// together send exactly the one-host run. Give each host the same options.
    #[arg(long = "segment", value_name = "I/N", value_parser = crate::segment::Segment::parse)]
    pub segment: Option<crate::segment::Segment>,

    /// Begin at this wall-clock time (RFC 3339, or +30s), as the other hosts of a split load do.
    ///
    /// The measured window and its intervals then fall at the same times on every host. A time
    /// already past, or a clock the kernel calls unsynchronised, is refused before anything starts.
    #[arg(long = "start-at", value_name = "TIME", value_parser = crate::start::StartAt::parse)]
    pub start_at: Option<crate::start::StartAt>,

    /// With --start-at: go on though the kernel says this host's clock is not synchronised.
    #[arg(long = "allow-unsynced", requires = "start_at")]
    pub allow_unsynced: bool,

    /// The id every host of a split run records, to be merged as one [default: from --start-at]
    #[arg(long = "run-id", value_name = "ID")]
    pub run_id: Option<String>,

    /// Send exactly this many requests (after warmup), then stop.
    #[arg(short = 'n', long = "requests")]
    pub requests: Option<u64>,

    /// Measured duration, e.g. 10s, 500ms, 2m (default 10s unless -n is given).
    #[arg(short = 'd', long = "duration", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Open loop: requests per second on a fixed schedule, or stages (1000:30s,ramp:1000-5000:60s).
    ///
    /// Latency counts from each request's intended send time. Stages change the rate over time:
    /// `1000:30s,5000:30s,ramp:5000-20000:60s` (steady rates and linear ramps from the start of
    /// the run; the last rate holds after them; without -d or -n the run lasts their total).
    #[arg(long = "rate", value_parser = crate::rate::RateSchedule::parse, value_name = "RATE|STAGES")]
    pub rate: Option<crate::rate::RateSchedule>,

    /// A new TCP connection for every request (its connect time is part of the latency).
    #[arg(long = "no-keepalive")]
    pub no_keepalive: bool,

    /// HTTP method (-m as oha and hey, -X as curl).
    #[arg(short = 'm', short_alias = 'X', long = "method", default_value = "GET")]
    pub method: String,

    /// Request header "Name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,

    /// Request body.
    #[arg(long = "body", conflicts_with = "body_file")]
    pub body: Option<String>,

    /// Request body read from a file.
    #[arg(long = "body-file")]
    pub body_file: Option<std::path::PathBuf>,

    /// Request timeout: a request without a whole answer by then is a read_timeout error.
    #[arg(long = "timeout", default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Load sent after ramp-up and before measurement starts, excluded from the figures.
    #[arg(long = "warmup", default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// Worker threads [default: one per --cpus CPU, else one per CPU].
    ///
    /// Each has its own runtime and connections.
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,

    /// Pin worker threads to these CPUs, e.g. 0,1 or 0-3.
    #[arg(long = "cpus", value_parser = parse_cpu_list)]
    pub cpus: Option<CpuList>,

    /// Open the connections gradually over this time, before warmup; not measured.
    #[arg(long = "ramp-up", default_value = "0s", value_parser = parse_duration)]
    pub ramp_up: Duration,

    /// Timeline interval.
    #[arg(long = "interval", default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,

    /// HTTP/1.1 client: builtin (fastest, no allocation per request) or hyper.
    #[arg(long = "engine", default_value = "builtin", value_parser = parse_engine)]
    pub engine: crate::Engine,

    /// Also write each --interval's latency (us) to FILE as an HdrHistogram interval log.
    ///
    /// HdrHistogram's tools read such logs and merge them across runs and clients.
    #[arg(long = "hdr-log", value_name = "FILE", help_heading = "Output")]
    pub hdr_log: Option<std::path::PathBuf>,

    /// Push each --interval's figures live to a Prometheus remote-write URL (http[s]://.../api/v1/write).
    ///
    /// Requests completed, errors by kind, throughput, and the latency as a native histogram,
    /// labelled run, segment and host: `sum` adds a split run's agents up. A failed push is noted
    /// in the report, never failing the run. Without --run-id or --start-at the run id is made
    /// from the start time. https trusts the system's CAs and --cacert's; --insecure is the
    /// load's alone. Credentials never go in the URL: see --remote-write-auth-file.
    #[arg(
        long = "remote-write",
        value_name = "URL",
        value_parser = crate::url_arg::Url(crate::http_push::Endpoint::remote_write),
        help_heading = "Output"
    )]
    pub remote_write: Option<crate::http_push::Endpoint>,

    /// --remote-write's credentials from FILE: USER:PASSWORD, or a bearer token.
    ///
    /// One line: USER:PASSWORD is sent as basic auth (Grafana Cloud, Mimir behind a proxy),
    /// anything without a colon as a bearer token. Without this option the environment variable
    /// SRVPROF_REMOTE_WRITE_AUTH is read, holding the same. Never on the command line, where ps
    /// and the shell's history show it.
    #[arg(
        long = "remote-write-auth-file",
        value_name = "FILE",
        requires = "remote_write",
        help_heading = "Output"
    )]
    pub remote_write_auth_file: Option<std::path::PathBuf>,

    /// Accept any server certificate (the handshake itself is unchanged).
    #[arg(long = "insecure", short = 'k', help_heading = "TLS")]
    pub insecure: bool,

    /// Also trust the certificates in this PEM file: CAs, or a server's own (the pushes' too).
    #[arg(long = "cacert", value_name = "FILE", help_heading = "TLS")]
    pub cacert: Option<std::path::PathBuf>,

    /// Present this client certificate chain (PEM), with --key.
    #[arg(long = "cert", value_name = "FILE", requires = "key", help_heading = "TLS")]
    pub cert: Option<std::path::PathBuf>,

    /// The private key of --cert (PEM).
    #[arg(long = "key", value_name = "FILE", requires = "cert", help_heading = "TLS")]
    pub key: Option<std::path::PathBuf>,

    /// Resume TLS sessions on new connections (on, as browsers do), or full handshakes (off).
    #[arg(
        help_heading = "TLS",
        long = "tls-resumption",
        value_name = "on|off",
        default_value = "on",
        value_parser = parse_on_off,
        action = clap::ArgAction::Set
    )]
    pub tls_resumption: bool,

    /// The name sent as SNI and checked against the certificate [default: the URL's host].
    #[arg(long = "sni", value_name = "NAME", help_heading = "TLS")]
    pub sni: Option<String>,

    /// Speak HTTP/2: over TLS (ALPN h2) for https://, cleartext (h2c) for http://.
    #[arg(long = "http2", help_heading = "HTTP/2")]
    pub http2: bool,

    /// Send the requests listed in FILE (vegeta's targets format) instead of the URL's one.
    ///
    /// Per request: `METHOD URL`, then `Name: value` headers and an optional `@body-file`; `#`
    /// comments. Every URL on the URL's server. A request listed twice is sent twice as often.
    #[arg(long = "targets", value_name = "FILE")]
    pub targets: Option<std::path::PathBuf>,

    /// How --targets are taken: round-robin (in the file's order) or random.
    ///
    /// Round-robin goes over all connections: with -n a multiple of the list, each request is sent
    /// exactly its share.
    #[arg(long = "targets-order", default_value = "round-robin", value_parser = parse_order)]
    pub targets_order: crate::targets::Order,

    /// Seed of --targets-order random: the same seed draws the same requests per connection.
    #[arg(long = "seed", default_value_t = 0)]
    pub seed: u64,

    /// Requests in flight at once on each of the -c connections (-c 10 --streams 10: 100).
    #[arg(long = "streams", default_value_t = 1, value_name = "N", help_heading = "HTTP/2")]
    pub streams: usize,
}

fn parse_order(text: &str) -> Result<crate::targets::Order, String> {
    match text {
        "round-robin" => Ok(crate::targets::Order::RoundRobin),
        "random" => Ok(crate::targets::Order::Random),
        other => Err(format!("`{other}` is neither round-robin nor random")),
    }
}

fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("`{other}` is neither on nor off")),
    }
}

fn parse_engine(text: &str) -> Result<crate::Engine, String> {
    match text {
        "builtin" => Ok(crate::Engine::Builtin),
        "hyper" => Ok(crate::Engine::Hyper),
        other => Err(format!("unknown engine `{other}`; use builtin or hyper")),
    }
}

/// A parsed `--cpus` list (a newtype so clap does not read it as a repeated option).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl Default for LoadArgs {
    fn default() -> LoadArgs {
        LoadArgs {
            connections: 50,
            segment: None,
            start_at: None,
            allow_unsynced: false,
            run_id: None,
            requests: None,
            duration: None,
            rate: None,
            no_keepalive: false,
            method: "GET".to_string(),
            headers: Vec::new(),
            body: None,
            body_file: None,
            timeout: Duration::from_secs(10),
            warmup: Duration::ZERO,
            threads: None,
            cpus: None,
            ramp_up: Duration::ZERO,
            interval: Duration::from_secs(1),
            engine: crate::Engine::Builtin,
            hdr_log: None,
            remote_write: None,
            remote_write_auth_file: None,
            insecure: false,
            cacert: None,
            cert: None,
            key: None,
            tls_resumption: true,
            sni: None,
            http2: false,
            streams: 1,
            targets: None,
            targets_order: crate::targets::Order::RoundRobin,
            seed: 0,
        }
    }
}

impl LoadArgs {
    /// The run these options describe; the URL is left empty for the caller to fill.
    pub fn to_config(&self) -> Result<LoadConfig, LoadError> {
        let mut headers = Vec::with_capacity(self.headers.len());
        for h in &self.headers {
            let (name, value) = h.split_once(':').ok_or_else(|| {
                // Quoted unless it may hold a secret (`-H "Authorization Bearer ..."`).
                let shown = match crate::redact::is_secret_name(h) {
                    true => crate::redact::REDACTED,
                    false => h.as_str(),
                };
                LoadError::InvalidOption(format!("header `{shown}` must look like \"Name: value\""))
            })?;
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
        let body = match (&self.body, &self.body_file) {
            (Some(text), _) => Some(text.clone().into_bytes()),
            (None, Some(path)) => {
                Some(std::fs::read(path).map_err(|source| LoadError::BodyFile {
                    path: path.display().to_string(),
                    source,
                })?)
            }
            (None, None) => None,
        };
        let duration = match (self.duration, self.requests, &self.rate) {
            // Stages count from the run's start: the measured window is what ramp-up and warmup
            // leave of them.
            (None, None, Some(rate)) if !rate.is_steady() => {
                let left = rate.length().saturating_sub(self.ramp_up + self.warmup);
                if left.is_zero() {
                    return Err(LoadError::InvalidOption(format!(
                        "the --rate stages last {:?}, no longer than --ramp-up and --warmup together; lengthen the stages or give -d",
                        rate.length()
                    )));
                }
                Some(left)
            }
            (None, None, _) => Some(Duration::from_secs(10)),
            (d, _, _) => d,
        };
        if let Some(at) = self.start_at {
            crate::start::check(at, &crate::start::clock_state(), self.allow_unsynced)?;
        }
        let segment = self.segment.unwrap_or(crate::segment::Segment::WHOLE);
        let connections = segment.share(self.connections as u64) as usize;
        let requests = self.requests.map(|n| segment.share(n));
        let none_of = |what: &str, flag: &str, total: u64| {
            LoadError::InvalidOption(format!(
                "--segment {segment} gets none of the run's {total} {what}: give {flag} at least {} (one per host)",
                segment.count()
            ))
        };
        if connections == 0 {
            return Err(none_of("connections", "-c", self.connections as u64));
        }
        if requests == Some(0) {
            return Err(none_of("requests", "-n", self.requests.unwrap_or(0)));
        }
        Ok(LoadConfig {
            url: String::new(),
            connections,
            segment,
            start_at: self.start_at,
            allow_unsynced: self.allow_unsynced,
            // The pushed series need a run to be told apart by.
            run_id: crate::start::run_id(self.run_id.as_deref(), self.start_at).or_else(|| {
                self.remote_write
                    .as_ref()
                    .map(|_| crate::start::run_id_from_now())
            }),
            // One thread per pinned CPU: two threads on one CPU only take turns.
            threads: self.threads.unwrap_or_else(|| match &self.cpus {
                Some(list) if !list.0.is_empty() => list.0.len(),
                _ => crate::sys::available_cpus(),
            }),
            duration,
            requests,
            rate: self.rate.clone(),
            keepalive: !self.no_keepalive,
            method: self.method.clone(),
            headers,
            body,
            timeout: self.timeout,
            warmup: self.warmup,
            cpus: self.cpus.as_ref().map(|c| c.0.clone()),
            ramp_up: self.ramp_up,
            interval: self.interval,
            engine: self.engine,
            hdr_log: self.hdr_log.clone(),
            remote_write: self.remote_write.clone(),
            remote_write_auth: match &self.remote_write {
                Some(_) => crate::push_auth::PushAuth::read(
                    self.remote_write_auth_file.as_deref(),
                    &crate::push_auth::REMOTE_WRITE,
                )?,
                None => None,
            },
            tls: crate::tls::TlsOptions {
                insecure: self.insecure,
                cacert: self.cacert.clone(),
                cert: self.cert.clone(),
                key: self.key.clone(),
                resumption: self.tls_resumption,
                sni: self.sni.clone(),
            },
            http2: self.http2,
            streams: self.streams,
            targets: self.targets.clone(),
            targets_order: self.targets_order,
            seed: self.seed,
        })
    }
}


/// Parse "0,1" or "0-3,6".
pub fn parse_cpu_list(text: &str) -> Result<CpuList, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("`{part}` is not a CPU number or range like 0-3");
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().map_err(|_| bad())?;
                let b: usize = b.trim().parse().map_err(|_| bad())?;
                if a > b {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    if cpus.is_empty() {
        return Err("--cpus needs at least one CPU number".to_string());
    }
    Ok(CpuList(cpus))
}

/// `srvprof load URL`: run, print text or JSON, optionally write the JSON report to `out`
/// (atomically). Ctrl-C stops the run early and still reports. Fails when nothing succeeded.
pub fn run_load_command(url: &str, args: &LoadArgs, json: bool, out: Option<&Path>) -> ExitCode {
    let mut config = match args.to_config() {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    config.url = url.to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let ctrl_c = spawn_ctrl_c_watcher(stop.clone());
    let result = crate::run(&config, stop.clone());
    // Let the watcher thread end.
    stop.store(true, Ordering::Relaxed);
    drop(ctrl_c);
    // Only the --hdr-log file failed after the run: the report is still printed and written.
    let (report, late_error) = match result {
        Ok(r) => (r, None),
        Err(mut e) => match e.take_measured() {
            Some(r) => (r, Some(e)),
            None => return fail(&e.to_string()),
        },
    };
    let mut stdout = std::io::stdout().lock();
    if json {
        let text = serde_json::to_string_pretty(&report).expect("report serializes");
        let _ = writeln!(stdout, "{text}");
    } else {
        crate::printer::print_text(&report, &mut stdout);
    }
    let _ = stdout.flush();
    if let Some(path) = out
        && let Err(e) = write_report(&report, path)
    {
        return fail(&format!(
            "cannot write the report to {}: {e}; check that the directory exists and is writable",
            path.display()
        ));
    }
    if let Some(e) = late_error {
        return fail(&e.to_string());
    }
    if report.any_success() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "error: no request succeeded ({} errors); see errors_by_kind",
            report.errors
        );
        ExitCode::FAILURE
    }
}

/// Write the JSON report through a temporary file and a rename, so readers never see half of it,
/// and a link planted at its name is replaced, not written through.
pub fn write_report(report: &LoadReport, path: &Path) -> std::io::Result<()> {
    let name = (path.file_name().and_then(|n| n.to_str()))
        .ok_or_else(|| std::io::Error::other("the name is not a file name in UTF-8"))?;
    let text = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    srvprof_files::OutDir::parent_of(path)?.write(name, &text)
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

/// Ctrl-C sets `stop` so the run ends early with what it measured. A tiny runtime of its own
/// keeps the load runtimes free of signal handling.
fn spawn_ctrl_c_watcher(stop: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("loadgen-ctrl-c".to_string())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                loop {
                    tokio::select! {
                        r = tokio::signal::ctrl_c() => {
                            if r.is_ok() {
                                eprintln!("stopping: Ctrl-C (the report covers the time until now)");
                                stop.store(true, Ordering::Relaxed);
                            }
                            return;
                        }
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {
                            if stop.load(Ordering::Relaxed) { return; }
                        }
                    }
                }
            });
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_method_is_m_as_in_oha_and_hey_or_x_as_in_curl() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            load: LoadArgs,
        }
        let method = |args: &[&str]| {
            let argv = std::iter::once("load").chain(args.iter().copied());
            Cli::try_parse_from(argv).map(|c| c.load.method)
        };
        assert_eq!(method(&[]).unwrap(), "GET");
        assert_eq!(method(&["-m", "POST"]).unwrap(), "POST");
        assert_eq!(method(&["-X", "PUT"]).unwrap(), "PUT");
        // -m is no longer --streams.
        let streams = Cli::try_parse_from(["load", "--streams", "8"]).unwrap();
        assert_eq!(streams.load.streams, 8);
        assert_eq!(Cli::try_parse_from(["load", "-m", "8"]).unwrap().load.method, "8");
    }

    #[test]
    fn remote_write_credentials_come_from_their_file_and_show_nowhere() {
        let file = std::env::temp_dir().join(format!("srvprof-rw-auth-{}", std::process::id()));
        std::fs::write(&file, "user:s3cret\n").unwrap();
        let args = LoadArgs {
            remote_write: Some(
                crate::http_push::Endpoint::remote_write("https://127.0.0.1:9/api/v1/write")
                    .unwrap(),
            ),
            remote_write_auth_file: Some(file.clone()),
            ..LoadArgs::default()
        };
        let config = args.to_config();
        std::fs::remove_file(&file).unwrap();
        let config = config.unwrap();
        assert!(config.remote_write_auth.is_some());
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0,1").unwrap().0, vec![0, 1]);
        assert_eq!(parse_cpu_list("0-2,5").unwrap().0, vec![0, 1, 2, 5]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("").is_err());
    }

    #[test]
    fn config_defaults_to_ten_seconds() {
        let c = LoadArgs::default().to_config().unwrap();
        assert_eq!(c.duration, Some(Duration::from_secs(10)));
        let c = LoadArgs {
            requests: Some(5),
            headers: vec!["X-Test: a: b".into()],
            ..LoadArgs::default()
        }
        .to_config()
        .unwrap();
        assert_eq!(c.duration, None);
        assert_eq!(c.headers, vec![("X-Test".to_string(), "a: b".to_string())]);
    }

    #[test]
    fn a_segment_takes_its_share_of_connections_and_requests() {
        let split = |segment: &str, c: usize, n: Option<u64>| {
            LoadArgs {
                segment: Some(crate::segment::Segment::parse(segment).unwrap()),
                connections: c,
                requests: n,
                ..LoadArgs::default()
            }
            .to_config()
        };
        let c = split("1/3", 50, Some(1000)).unwrap();
        assert_eq!((c.connections, c.requests), (17, Some(334)));
        let c = split("3/3", 50, Some(1000)).unwrap();
        assert_eq!((c.connections, c.requests), (16, Some(333)));
        let err = split("4/4", 3, None).unwrap_err().to_string();
        assert!(err.contains("none of the run's 3 connections") && err.contains("-c at least 4"), "{err}");
        let err = split("2/2", 4, Some(1)).unwrap_err().to_string();
        assert!(err.contains("none of the run's 1 requests"), "{err}");
    }

    #[test]
    fn pinned_runs_default_to_one_thread_per_cpu() {
        let pinned = LoadArgs {
            cpus: Some(CpuList(vec![0])),
            ..LoadArgs::default()
        };
        assert_eq!(pinned.to_config().unwrap().threads, 1);
        let explicit = LoadArgs {
            cpus: Some(CpuList(vec![0])),
            threads: Some(3),
            ..LoadArgs::default()
        };
        assert_eq!(explicit.to_config().unwrap().threads, 3);
    }
}
