//! Command-line arguments. The binary only parses these and calls the library.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use srvprof_loadgen::url_arg::Url;

#[derive(Parser, Debug)]
#[command(
    name = "srvprof",
    version,
    about = "Drive a network server with load and watch the kernel underneath it (eBPF)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `run` warms up for 2 s unless --warmup says otherwise: the server's caches and the load
/// generator's connections settle before anything is measured (`load` starts at once).
pub const RUN_WARMUP: &str = "2s";

impl Cli {
    /// The command line as parsed and as `--help` shows it, with `run`'s own defaults.
    pub fn command_line() -> clap::Command {
        use clap::CommandFactory;
        Cli::command().mut_subcommand("run", |run| {
            run.mut_arg("warmup", |a| a.default_value(RUN_WARMUP))
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Drive a server with load and watch its kernel in the same run; relate the two.
    Run(RunArgs),
    /// Drive an HTTP server with load (closed or open loop), like wrk or oha.
    Load(LoadCmdArgs),
    /// Watch running processes' kernel behaviour (context switches, syscalls, CPU, interrupts, TCP, exits).
    Probe(ProbeArgs),
    /// Two runs side by side (run folders or run.json files), with B/A ratios.
    Compare {
        /// The run compared against: a run folder or its run.json.
        a: PathBuf,
        /// The run compared: a run folder or its run.json.
        b: PathBuf,
        /// Folder for the differential flamegraphs (default: B's run folder).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Rewrite report.html (findings, timeline, flamegraphs, context switches) from a run folder.
    Report(ReportArgs),
    /// Make one run of a split run's folders: the load agents' latencies added, not averaged.
    Merge {
        /// The folders each host wrote: `srvprof load --out DIR` (every segment once), and
        /// `srvprof probe --start-at ... --out DIR` for the servers.
        #[arg(required = true, num_args = 1..)]
        dirs: Vec<PathBuf>,
        /// The merged run's folder: load.json, latency.hlog, the servers' probe reports.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Overwrite files in DIR that srvprof did not write.
        #[arg(long)]
        force: bool,
    },
    /// Render one split run for Kubernetes (an Indexed Job, a DaemonSet), ssh or pdsh.
    Plan(PlanArgs),
    /// Check every prerequisite (privileges, BTF, limits, each eBPF program) and say how to fix what fails.
    Check(CheckArgs),
    /// What a finding's kind means, its evidence, the usual fix and its rule (all kinds without one).
    Explain {
        /// A finding's kind as run.json names it, e.g. syn_retransmit_tail.
        kind: Option<String>,
    },
    /// Print the completion script of a shell: srvprof completions bash > /etc/bash_completion.d/srvprof
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print srvprof's man page (roff): srvprof man > /usr/local/share/man/man1/srvprof.1
    Man,
}

/// The completion script of `shell` for srvprof's command line.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command_line(), "srvprof", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// srvprof's man page, its commands' options included, in roff.
pub fn man_page() -> String {
    let cli = Cli::command_line();
    let mut out = Vec::new();
    let man = clap_mangen::Man::new(cli.clone());
    man.render(&mut out).expect("writes to memory");
    // Each command's own options, as a section after the main page.
    for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        out.extend_from_slice(
            format!(
                ".SH \"SRVPROF {}\"\n{about}\n",
                sub.get_name().to_uppercase()
            )
            .as_bytes(),
        );
        let _ = clap_mangen::Man::new(sub.clone()).render_options_section(&mut out);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Args, Debug, Clone)]
pub struct LoadCmdArgs {
    /// The URL to load, e.g. http://127.0.0.1:8080/
    #[arg(value_parser = Url(srvprof_loadgen::url_arg::target))]
    pub url: String,
    #[command(flatten)]
    pub load: srvprof_loadgen::cli::LoadArgs,
    /// Print the report as JSON.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Also write the JSON report to DIR/load.json, and the latency log to DIR/latency.hlog.
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
// The server is given one way: a missing one is named as "--pid or --cmd", not as --pid alone.
#[command(group(clap::ArgGroup::new("server").required(true).args(["pids", "cmd"])))]
#[command(next_help_heading = "Server")]
pub struct RunArgs {
    /// The server's process IDs, all pgrep prints: --pid $(pgrep nginx); their children too.
    #[arg(long = "pid", short = 'p', num_args = 1..)]
    pub pids: Vec<u32>,
    /// Start the server with this shell command, profile it once it listens, then stop it.
    /// Under sudo it runs as the user who ran sudo, not as root.
    #[arg(long)]
    pub cmd: Option<String>,
    /// Start --cmd as root even under sudo.
    #[arg(long, requires = "cmd")]
    pub cmd_as_root: bool,
    /// The URL to load [default: the TCP address the server listens on].
    #[arg(long, value_parser = Url(srvprof_loadgen::url_arg::target))]
    pub url: Option<String>,
    #[command(flatten)]
    pub load: srvprof_loadgen::cli::LoadArgs,
    /// Folder for run.json, the stacks and report.html [default: ./srvprof-run-YYYYMMDD-HHMMSS].
    #[arg(long, help_heading = "Output")]
    pub out: Option<PathBuf>,
    /// Print run.json on standard output instead of the summary.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Also print the timeline, a row per --interval, in the summary.
    #[arg(long, help_heading = "Output")]
    pub timeline: bool,
    /// Overwrite files in --out even if srvprof did not write them.
    #[arg(long, help_heading = "Output")]
    pub force: bool,
    /// Then push the server's pprof profile to Pyroscope at this URL (http://pyroscope:4040).
    ///
    /// POSTed to URL/ingest as the app srvprof, labelled run and host, over the measured window;
    /// needs the stacks. A failed push is one line on standard error, never a failed run. https
    /// trusts the system's CAs and --cacert's. Credentials: see --pyroscope-auth-file.
    #[arg(
        long,
        value_name = "URL",
        value_parser = Url(srvprof_loadgen::http_push::Endpoint::pyroscope),
        help_heading = "Output"
    )]
    pub pyroscope: Option<srvprof_loadgen::http_push::Endpoint>,
    /// --pyroscope's credentials from FILE: USER:PASSWORD, or a bearer token.
    ///
    /// One line: USER:PASSWORD is sent as basic auth (Grafana Cloud's user id and token), anything
    /// without a colon as a bearer token. Without this option the environment variable
    /// SRVPROF_PYROSCOPE_AUTH is read, holding the same. Never in the URL.
    #[arg(
        long = "pyroscope-auth-file",
        value_name = "FILE",
        requires = "pyroscope",
        help_heading = "Output"
    )]
    pub pyroscope_auth_file: Option<PathBuf>,
    /// On-CPU stack sampling frequency, Hz (software cpu-clock event on every CPU).
    #[arg(long, default_value_t = 99, value_parser = clap::value_parser!(u64).range(1..=10000), help_heading = "Probes")]
    pub freq: u64,
    /// On- and off-CPU stacks (flamegraphs): on (the server's), all (the load's too) or off.
    ///
    /// Measured on one nginx worker, p99 against the load alone's: 1.08x on, 1.10-1.20x all (its
    /// samples take the CPU the load runs on), 1.05x off.
    #[arg(long, value_enum, default_value_t = Stacks::On, help_heading = "Probes")]
    pub stacks: Stacks,
    #[command(flatten)]
    pub syscalls: SyscallsArg,
}

/// Whose stacks `run` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Stacks {
    /// The server's.
    On,
    /// The server's and the load generator's: srvprof's own, on the CPUs it keeps busy, so
    /// sampling them slows the requests it times.
    All,
    Off,
}

impl Stacks {
    pub fn on(self) -> bool {
        self != Stacks::Off
    }
}

/// Shared by `run` and `probe`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Probes")]
pub struct SyscallsArg {
    /// Count and time every syscall of the targets: on or off.
    ///
    /// While the syscall programs are attached (in short windows by default, all along with
    /// --exact), every syscall of every process on the machine takes the kernel's traced path:
    /// 65-160 ns more each, measured on this project's VMs (docs/overhead.md). Off makes the probes
    /// cheapest on a syscall-heavy server.
    #[arg(long = "syscalls", default_value = "on", value_name = "on|off", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub on: bool,
    /// Trace syscalls and softirqs all the time: exact counts and times, at a higher cost.
    ///
    /// By default their programs
    /// are attached for one window an interval where the server is busy, 5 % of the time, and
    /// the figures are scaled up from it (a syscall's sleeps, softirq counts and hardirqs are
    /// counted all along). Measured on one nginx worker beside wrk: exact, 13-15 % of its
    /// throughput and p99 1.17x; sampled, p99 1.14x, of which 1.10x is the kernel's traced path
    /// alone (docs/benchmarks.md; each run's own cost is in run.json's `observer`).
    #[arg(long)]
    pub exact: bool,
    /// Leave these probe families detached: irq, tcp, exits, reclaim, oncpu, offcpu, pauses.
    ///
    /// Comma-separated; their figures read zero. For a kernel where one family cannot load
    /// (`srvprof check` says which), and for measuring what each costs (`cargo xtask bench
    /// overhead`).
    #[arg(
        long = "skip-probes",
        value_delimiter = ',',
        value_name = "FAMILIES",
        hide_possible_values = true
    )]
    pub skip: Vec<crate::probes::Family>,
    /// The syscall and softirq programs return at once: what the kernel's traced path and the
    /// dispatch to them cost alone, for `cargo xtask bench overhead` (their figures read zero).
    #[arg(long = "empty-window-programs", hide = true)]
    pub empty_window_programs: bool,
}

/// Sampled mode attaches the syscall and softirq programs for interval / this in all. The
/// requests served in the window are slowed by the tracing (a fifth on a one-worker nginx): at a
/// twentieth of the time that raised wrk's p99 1.14x (1.10x with the programs empty: the kernel's
/// traced path itself). A two-hundredth raised it 1.00-1.10x, but
/// each 5 ms window caught one of a closed loop's batching modes, and nginx's epoll_wait calls
/// scaled from them read 0.2-1.8x syscount's (docs/benchmarks.md).
pub const SAMPLED_WINDOW_DIVISOR: u32 = 20;
/// Sampled mode: in that many windows per interval, one in each equal slot of it.
pub const WINDOWS_PER_INTERVAL: u32 = 4;

impl ProbeArgs {
    /// The format on standard output: --json or --format.
    pub fn format(&self) -> Format {
        if self.json { Format::Json } else { self.format }
    }
}

impl SyscallsArg {
    /// The length of each of the syscall and interrupt programs' windows; None: attached all
    /// along.
    pub fn sampled_window(&self, interval: std::time::Duration) -> Option<std::time::Duration> {
        (!self.exact).then(|| interval / (SAMPLED_WINDOW_DIVISOR * WINDOWS_PER_INTERVAL))
    }
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("'{s}' is neither on nor off")),
    }
}

/// `srvprof report DIR`: rewrite DIR/report.html from run.json and the folded stacks.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// A folder `srvprof run --out` wrote.
    pub dir: PathBuf,
    /// Only flamegraphs of the stacks from this time on (since the measured window started,
    /// e.g. 3s); written as flamegraph-KIND-GROUP-FROM-TO.svg, report.html left as it is.
    /// Stacks are timed per timeline interval (the run's --interval): a window holds the
    /// intervals that start in it.
    #[arg(long, value_parser = parse_duration)]
    pub from: Option<Duration>,
    /// ...up to this time (default: the end of the run).
    #[arg(long, value_parser = parse_duration)]
    pub to: Option<Duration>,
}

/// A duration (10s, 500ms, 2m), or a bare number of seconds, as wrk and ab
/// take it (the load options' -d reads the same: srvprof_loadgen::cli::parse_duration).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    srvprof_loadgen::cli::parse_duration(s)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Watch")]
pub struct ProbeArgs {
    /// Process IDs to watch, with their threads and children: --pid $(pgrep nginx).
    #[arg(long = "pid", short = 'p', num_args = 1.., required = true)]
    pub pids: Vec<u32>,
    /// How long to watch.
    #[arg(short = 'd', long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Length of one timeline row.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Begin watching at this wall-clock time (RFC 3339, or +30s), with a split load's hosts.
    ///
    /// The timeline's rows then fall at the same times as the load agents' intervals. A time
    /// already past, or a clock the kernel calls unsynchronised, is refused before anything
    /// is attached.
    #[arg(long = "start-at", value_name = "TIME", value_parser = srvprof_loadgen::start::StartAt::parse)]
    pub start_at: Option<srvprof_loadgen::start::StartAt>,
    /// With --start-at: go on though the kernel says this host's clock is not synchronised.
    #[arg(long = "allow-unsynced", requires = "start_at")]
    pub allow_unsynced: bool,
    /// The id of the split run this is the server's side of [default: from --start-at].
    #[arg(long = "run-id", value_name = "ID")]
    pub run_id: Option<String>,
    /// Print the report as JSON on standard output (the same as --format json).
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Output format on standard output: text or json.
    #[arg(
        long,
        value_enum,
        default_value = "text",
        help_heading = "Output",
        hide_short_help = true
    )]
    pub format: Format,
    /// Also write the JSON report to DIR/probe.json.
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub out: Option<PathBuf>,
    /// Overwrite DIR/probe.json even if srvprof did not write it.
    #[arg(long, help_heading = "Output")]
    pub force: bool,
    /// The targets' on- and off-CPU stacks: on or off.
    ///
    /// With --out, written to DIR for `srvprof merge`: a split run's flamegraphs and where its
    /// p99's time went.
    #[arg(long = "stacks", default_value = "off", value_name = "on|off", value_parser = parse_on_off, action = clap::ArgAction::Set, help_heading = "Probes")]
    pub stacks: bool,
    /// On-CPU stack sampling frequency, Hz (software cpu-clock event on every CPU).
    #[arg(long, default_value_t = 99, value_parser = clap::value_parser!(u64).range(1..=10000), help_heading = "Probes")]
    pub freq: u64,
    /// Then push the targets' pprof profile (DIR/profile-server.pb.gz) to Pyroscope at this URL.
    ///
    /// As `run --pyroscope` does, labelled with the run id; needs --stacks on and --out. A failed
    /// push is one line on standard error.
    #[arg(
        long,
        value_name = "URL",
        value_parser = Url(srvprof_loadgen::http_push::Endpoint::pyroscope),
        requires = "out",
        help_heading = "Output"
    )]
    pub pyroscope: Option<srvprof_loadgen::http_push::Endpoint>,
    /// --pyroscope's credentials from FILE: USER:PASSWORD, or a bearer token.
    ///
    /// As `run --pyroscope-auth-file`; without it the environment variable
    /// SRVPROF_PYROSCOPE_AUTH is read. Never in the URL.
    #[arg(
        long = "pyroscope-auth-file",
        value_name = "FILE",
        requires = "pyroscope",
        help_heading = "Output"
    )]
    pub pyroscope_auth_file: Option<PathBuf>,
    /// --pyroscope over https: also trust the certificates in this PEM file (a CA, or its own).
    #[arg(
        long = "cacert",
        value_name = "FILE",
        requires = "pyroscope",
        help_heading = "Output"
    )]
    pub cacert: Option<PathBuf>,
    #[command(flatten)]
    pub syscalls: SyscallsArg,
}

/// `srvprof plan URL [load options]`: one split run, every host given the same start.
#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// The URL the load agents load, e.g. http://server:8080/
    #[arg(value_parser = Url(srvprof_loadgen::url_arg::target))]
    pub url: String,
    #[command(flatten)]
    pub load: srvprof_loadgen::cli::LoadArgs,
    /// The client hosts: how many (kubernetes), or their names (ssh, pdsh): 3, or a,b,c.
    #[arg(long, value_name = "N|HOST,...", value_parser = Hosts::parse, help_heading = "Plan")]
    pub hosts: Hosts,
    /// The shell command printing the server's PIDs on its host, e.g. 'pgrep nginx'.
    #[arg(long, value_name = "COMMAND", help_heading = "Plan")]
    pub server_pids_from: String,
    /// What to render: kubernetes (manifests), ssh or pdsh (a shell script).
    #[arg(long, value_enum, default_value = "kubernetes", help_heading = "Plan")]
    pub format: PlanFormat,
    /// ssh, pdsh: the server hosts' names, comma-separated.
    #[arg(
        long,
        value_name = "HOST,...",
        value_delimiter = ',',
        help_heading = "Plan"
    )]
    pub servers: Vec<String>,
    /// kubernetes: the image with srvprof on its PATH, sh, and what --server-pids-from runs.
    #[arg(long, help_heading = "Plan")]
    pub image: Option<String>,
    /// kubernetes: the namespace of the Job and the DaemonSet.
    #[arg(long, default_value = "default", help_heading = "Plan")]
    pub namespace: String,
    /// kubernetes: the node label of the server's nodes, where the probes run (no agent does).
    #[arg(
        long,
        value_name = "KEY=VALUE",
        default_value = "srvprof/server=true",
        help_heading = "Plan"
    )]
    pub server_label: String,
    /// The folder each host writes its results under [default: /var/lib/srvprof on each node
    /// (kubernetes), srvprof-runs in the login's home (ssh, pdsh)].
    #[arg(long, value_name = "DIR", help_heading = "Plan")]
    pub results: Option<String>,
    /// kubernetes: a ReadWriteMany PersistentVolumeClaim every pod writes to, not a node folder.
    #[arg(long, value_name = "NAME", help_heading = "Plan")]
    pub claim: Option<String>,
    /// Write the manifests (or run.sh) to DIR instead of standard output.
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub out: Option<PathBuf>,
}

/// `--hosts`: how many client hosts, or their names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hosts {
    Count(u64),
    Names(Vec<String>),
}

impl Hosts {
    pub fn parse(text: &str) -> Result<Hosts, String> {
        if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
            return match text.parse() {
                Ok(0) | Err(_) => Err(format!("`{text}` client hosts: give 1 or more")),
                Ok(n) => Ok(Hosts::Count(n)),
            };
        }
        let names: Vec<String> = text.split(',').map(|h| h.trim().to_string()).collect();
        if names.iter().any(String::is_empty) {
            return Err(format!(
                "`{text}` is neither a number of hosts nor a list of names like a,b,c"
            ));
        }
        Ok(Hosts::Names(names))
    }

    pub fn count(&self) -> u64 {
        match self {
            Hosts::Count(n) => *n,
            Hosts::Names(names) => names.len() as u64,
        }
    }
}

/// What `srvprof plan` renders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    /// An Indexed Job for the load agents and a DaemonSet for the probes.
    Kubernetes,
    /// A shell script: one ssh line per host, then the folders fetched and merged.
    Ssh,
    /// The same with pdsh, whose output names each line's host.
    Pdsh,
    /// The same as Ansible ad-hoc commands (its shell module), to hosts of your inventory.
    Ansible,
}

#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod stacks_args_tests {
    use super::*;
    use clap::Parser;

    /// Parsed as srvprof parses its command line.
    fn parse(argv: &[&str]) -> Command {
        let matches = Cli::command_line()
            .try_get_matches_from(argv)
            .expect("parses");
        clap::FromArgMatches::from_arg_matches(&matches)
            .map(|cli: Cli| cli.command)
            .expect("parses")
    }

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["srvprof", "run", "--pid", "1"];
        argv.extend_from_slice(extra);
        match parse(&argv) {
            Command::Run(args) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn short_help_groups_every_option_under_a_heading_in_two_lines_of_100_columns() {
        let mut cli = Cli::command_line().term_width(100);
        for name in ["run", "load", "probe"] {
            let cmd = cli.find_subcommand_mut(name).expect(name);
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id != "help" && !arg.is_positional() {
                    assert!(
                        arg.get_help_heading().is_some(),
                        "{name} --{id}: no heading"
                    );
                }
            }
            let help = cmd.render_help().to_string();
            let mut lines_of_option = 0;
            for line in help.lines() {
                assert!(line.len() <= 100, "{name}: {line}");
                let starts_option = line.starts_with("  -") || line.starts_with("      --");
                if starts_option {
                    lines_of_option = 1;
                } else if line.starts_with("    ") && lines_of_option > 0 {
                    lines_of_option += 1;
                    assert!(lines_of_option <= 2, "{name}: more than two lines: {line}");
                } else {
                    lines_of_option = 0;
                }
            }
        }
    }

    #[test]
    fn json_is_asked_for_with_json_on_every_command_that_prints_a_result() {
        assert!(run_args(&["--json"]).json);
        for argv in [
            &["srvprof", "probe", "--pid", "1", "--json"][..],
            &["srvprof", "probe", "--pid", "1", "--format", "json"],
        ] {
            match parse(argv) {
                Command::Probe(args) => assert_eq!(args.format(), Format::Json),
                other => panic!("{other:?}"),
            }
        }
        match parse(&["srvprof", "load", "http://127.0.0.1:1/", "--json"]) {
            Command::Load(args) => assert!(args.json),
            other => panic!("{other:?}"),
        }
        match parse(&["srvprof", "check", "--json"]) {
            Command::Check(args) => assert!(args.json),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn completions_and_the_man_page_come_from_the_command_line() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let script = completions(shell);
            assert!(
                script.contains("srvprof")
                    && script.contains("connections")
                    && script.contains("timeline"),
                "{shell}: {script}"
            );
        }
        let man = man_page();
        assert!(man.contains(".TH srvprof 1"), "{man}");
        for section in [
            "SRVPROF RUN",
            "SRVPROF LOAD",
            "SRVPROF PROBE",
            "SRVPROF CHECK",
        ] {
            assert!(man.contains(section), "{section}");
        }
        assert!(man.contains("\\-\\-connections") && man.contains("\\-\\-stacks"));
        match parse(&["srvprof", "completions", "bash"]) {
            Command::Completions { shell } => assert_eq!(shell, clap_complete::Shell::Bash),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn run_warms_up_two_seconds_load_none_and_help_says_so() {
        use std::time::Duration;
        assert_eq!(run_args(&[]).load.warmup, Duration::from_secs(2));
        assert_eq!(run_args(&["--warmup", "0s"]).load.warmup, Duration::ZERO);
        match parse(&["srvprof", "load", "http://127.0.0.1:1/"]) {
            Command::Load(args) => assert_eq!(args.load.warmup, Duration::ZERO),
            other => panic!("{other:?}"),
        }
        let mut cli = Cli::command_line();
        let help = cli
            .find_subcommand_mut("run")
            .expect("run")
            .render_long_help()
            .to_string();
        let warmup = &help[help.find("--warmup").expect("--warmup in run's help")..];
        let option = &warmup[..warmup.find("\n      -").unwrap_or(warmup.len())];
        assert!(option.contains("[default: 2s]"), "{option}");
    }

    #[test]
    fn stacks_default_on_at_99_hz_and_can_be_turned_off() {
        let default = run_args(&[]);
        assert_eq!(default.stacks, Stacks::On);
        assert_eq!(default.freq, 99);
        assert_eq!(run_args(&["--stacks", "all"]).stacks, Stacks::All);
        let off = run_args(&["--stacks", "off", "--freq", "49"]);
        assert_eq!(off.stacks, Stacks::Off);
        assert_eq!(off.freq, 49);
        assert!(
            Cli::try_parse_from(["srvprof", "run", "--pid", "1", "--stacks", "maybe"]).is_err()
        );
    }

    #[test]
    fn run_names_both_ways_of_giving_the_server_when_none_is_given() {
        let err = Cli::try_parse_from(["srvprof", "run", "-c", "10"]).unwrap_err();
        let said = err.to_string();
        assert!(said.contains("--pid") && said.contains("--cmd"), "{said}");
        assert!(Cli::try_parse_from(["srvprof", "run", "--pid", "1", "--cmd", "x"]).is_err());
        let cmd = Cli::try_parse_from(["srvprof", "run", "--cmd", "servers/go/run"]).unwrap();
        assert!(matches!(
            cmd.command,
            Command::Run(RunArgs { cmd: Some(_), .. })
        ));
    }

    #[test]
    fn syscalls_default_on_for_run_and_probe_and_can_be_turned_off() {
        assert!(run_args(&[]).syscalls.on);
        assert!(!run_args(&["--syscalls", "off"]).syscalls.on);
        let probe = |extra: &[&str]| {
            let mut argv = vec!["srvprof", "probe", "--pid", "1"];
            argv.extend_from_slice(extra);
            match Cli::try_parse_from(argv).expect("parses").command {
                Command::Probe(args) => args.syscalls.on,
                other => panic!("{other:?}"),
            }
        };
        assert!(probe(&[]));
        assert!(!probe(&["--syscalls", "off"]));
        assert!(
            Cli::try_parse_from(["srvprof", "probe", "--pid", "1", "--syscalls", "no"]).is_err()
        );
    }

    #[test]
    fn every_url_with_a_port_out_of_range_is_refused_before_anything_runs() {
        let bad = "http://127.0.0.1:99999/";
        for argv in [
            &["srvprof", "load", bad][..],
            &["srvprof", "run", "--pid", "1", "--url", bad],
            &["srvprof", "run", "--pid", "1", "--pyroscope", bad],
            &[
                "srvprof",
                "load",
                "http://127.0.0.1:8080/",
                "--remote-write",
                bad,
            ],
            &[
                "srvprof",
                "probe",
                "--pid",
                "1",
                "--out",
                "d",
                "--pyroscope",
                bad,
            ],
            &[
                "srvprof",
                "plan",
                bad,
                "--hosts",
                "2",
                "--server-pids-from",
                "pgrep x",
            ],
        ] {
            let e = Cli::command_line()
                .try_get_matches_from(argv)
                .expect_err(&argv.join(" "))
                .to_string();
            assert!(
                e.contains("port `99999` is not a number from 1 to 65535"),
                "{argv:?}: {e}"
            );
        }
    }

    #[test]
    fn durations_without_a_unit_are_seconds_and_t_is_threads_as_in_wrk() {
        let run = run_args(&["-d", "30", "-t", "3"]);
        assert_eq!(run.load.duration, Some(Duration::from_secs(30)));
        assert_eq!(run.load.threads, Some(3));
        match Cli::try_parse_from(["srvprof", "probe", "--pid", "1", "-d", "2"])
            .expect("parses")
            .command
        {
            Command::Probe(args) => assert_eq!(args.duration, Duration::from_secs(2)),
            other => panic!("{other:?}"),
        }
        let report = |a: &[&str]| {
            let mut argv = vec!["srvprof", "report", "dir"];
            argv.extend_from_slice(a);
            match Cli::try_parse_from(argv).expect("parses").command {
                Command::Report(r) => (r.from, r.to),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            report(&["--from", "3", "--to", "4.5s"]),
            (
                Some(Duration::from_secs(3)),
                Some(Duration::from_millis(4500))
            )
        );
        assert!(Cli::try_parse_from(["srvprof", "probe", "--pid", "1", "-d", "soon"]).is_err());
    }
}
