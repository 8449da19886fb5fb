//! `srvprof plan`: one split run rendered for the launcher users already have, either the
//! Kubernetes manifests of deploy/kubernetes/ filled in (an Indexed Job for the load agents, a
//! DaemonSet for the probes) or ssh / pdsh command lines, every host given the same absolute
//! start time and run id. The manifests are plain templates, every value written into them as a
//! JSON scalar, which YAML reads as the same value: the comments stay, and no option can break
//! the YAML. Every value is checked first (validate.rs) and written as one shell word or one
//! YAML scalar (quote.rs).

mod quote;
mod validate;

use std::path::Path;
use std::time::{Duration, SystemTime};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args};
use serde_json::json;
use srvprof_loadgen::cli::LoadArgs;
use srvprof_loadgen::start::StartAt;

use crate::cli::{Hosts, PlanArgs, PlanFormat};
use crate::error::SrvprofError;
use quote::{shell_word, shell_words, yaml};

pub const JOB_TEMPLATE: &str = include_str!("../../../../deploy/kubernetes/load-agents-job.yaml");
pub const DAEMONSET_TEMPLATE: &str =
    include_str!("../../../../deploy/kubernetes/probe-daemonset.yaml");
/// The file names `--out DIR` writes, those of the templates.
pub const JOB_FILE: &str = "load-agents-job.yaml";
pub const DAEMONSET_FILE: &str = "probe-daemonset.yaml";
pub const SCRIPT_FILE: &str = "run.sh";
/// Where the pods mount the results volume.
const MOUNT: &str = "/srvprof";

/// One split run, resolved: what every host is given.
#[derive(Debug)]
pub struct Plan {
    pub hosts: Hosts,
    pub run_id: String,
    /// The run id as a name Kubernetes and file systems take (folders, labels, object names).
    pub slug: String,
    /// When the agents start (ramp-up and warm-up, then the measured window).
    pub start: StartAt,
    /// When the measured window starts: the probes watch from then.
    pub probe_start: StartAt,
    /// `srvprof load`'s arguments but the segment and the folder: the URL, the options as
    /// given, the start and the run id.
    pub load_args: Vec<String>,
    /// `srvprof probe`'s arguments but the PIDs and the folder.
    pub probe_args: Vec<String>,
    /// The load's words written with `<redacted>` in place of a secret, as they now read.
    pub redacted: Vec<String>,
}

impl Plan {
    /// Reads the options: `load_options` are the load options as given on the command line.
    pub fn new(args: &PlanArgs, load_options: Vec<String>) -> Result<Plan, SrvprofError> {
        let load = &args.load;
        let usage = |s: String| Err(SrvprofError::Usage(s));
        if let Some(segment) = load.segment {
            return usage(format!(
                "--segment {segment}: plan gives each client host its own segment; leave --segment out"
            ));
        }
        if load.hdr_log.is_some() {
            return usage(
                "--hdr-log would move each agent's latency log out of its folder, where `srvprof merge` reads it; leave it out".into(),
            );
        }
        let Some(start) = load.start_at else {
            return usage(
                "plan needs --start-at: the time every host starts at, e.g. +2m (made absolute here) or 2026-11-29T10:00:00Z".into(),
            );
        };
        if let Err(late) = start.0.duration_since(SystemTime::now()) {
            return usage(format!(
                "--start-at {} passed {:.0} s ago: give a time still ahead when every host has started, e.g. +2m",
                start.to_rfc3339(),
                late.duration().as_secs_f64()
            ));
        }
        // To the millisecond, as every host is given it.
        let start = StartAt::parse(&start.to_rfc3339()).expect("an RFC 3339 time");
        let duration = measured_duration(load)?;
        let run_id = srvprof_loadgen::start::run_id(load.run_id.as_deref(), Some(start))
            .expect("a start gives an id");
        validate::url(&args.url)?;
        validate::run_id(&run_id)?;
        validate::pids_from(&args.server_pids_from)?;
        let probe_start = StartAt(start.0 + load.ramp_up + load.warmup);
        let mut load_args = vec![args.url.clone()];
        load_args.extend(load_options);
        let redacted = redact_words(&mut load_args);
        load_args.extend([
            "--start-at".into(),
            start.to_rfc3339(),
            "--run-id".into(),
            run_id.clone(),
        ]);
        let mut probe_args = vec![
            "-d".into(),
            duration_text(duration),
            "--interval".into(),
            duration_text(load.interval),
            "--start-at".into(),
            probe_start.to_rfc3339(),
            "--run-id".into(),
            run_id.clone(),
            // The merged run's flamegraphs and its account of p99 are made of these.
            "--stacks".into(),
            "on".into(),
        ];
        if load.allow_unsynced {
            probe_args.push("--allow-unsynced".into());
        }
        Ok(Plan {
            hosts: args.hosts.clone(),
            slug: slug(&run_id),
            run_id,
            start,
            probe_start,
            load_args,
            probe_args,
            redacted,
        })
    }
}

/// The load's words with their secrets redacted (the URL's userinfo and secret parameters,
/// secret -H values): what was, for the sentence that says so.
fn redact_words(words: &mut [String]) -> Vec<String> {
    use srvprof_loadgen::redact;
    let mut redacted = Vec::new();
    let mut previous = None::<String>;
    for word in words.iter_mut() {
        let shown = match previous.as_deref() {
            Some("--header") => {
                let (name, _) = word.split_once(':').unwrap_or((word.as_str(), ""));
                redact::is_secret_name(name)
                    .then(|| format!("{}: {}", name.trim(), redact::REDACTED))
            }
            // The URL (the first word) and --remote-write's.
            None | Some("--remote-write") => Some(redact::url(word)).filter(|u| u != word),
            _ => None,
        };
        if let Some(shown) = shown {
            redacted.push(match previous.as_deref() {
                Some(option) => format!("{option} {shown}"),
                None => format!("the URL {shown}"),
            });
            *word = shown;
        }
        previous = Some(word.clone());
    }
    redacted
}

/// The load's measured window, which the probes watch: -d, or what --rate's stages leave after
/// ramp-up and warm-up, or the load's default of 10 s.
fn measured_duration(load: &LoadArgs) -> Result<Duration, SrvprofError> {
    match (load.duration, load.requests, &load.rate) {
        (Some(d), _, _) => Ok(d),
        (None, Some(_), _) => Err(SrvprofError::Usage(
            "with -n and no -d the run's length is not known ahead, and the probes must watch for a set time: give -d".into(),
        )),
        (None, None, Some(rate)) if !rate.is_steady() => {
            let left = rate.length().saturating_sub(load.ramp_up + load.warmup);
            if left.is_zero() {
                return Err(SrvprofError::Usage(
                    "the --rate stages last no longer than --ramp-up and --warmup together; lengthen the stages or give -d".into(),
                ));
            }
            Ok(left)
        }
        (None, None, _) => Ok(Duration::from_secs(10)),
    }
}

/// A duration as `-d` reads it.
fn duration_text(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

/// The run id in lower-case letters, digits and dashes, 40 at most: a Kubernetes label value, a
/// part of an object's name and a folder's name.
pub fn slug(run_id: &str) -> String {
    let mut out = String::new();
    for c in run_id.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out: String = out.trim_matches('-').chars().take(40).collect();
    let out = out.trim_end_matches('-');
    if out.is_empty() {
        "run".into()
    } else {
        out.into()
    }
}

/// The load options as given to `plan` (their values as typed, in their order), less those plan
/// writes itself (--start-at, --run-id), each by its long name.
pub fn given_load_options(matches: &ArgMatches) -> Result<Vec<String>, SrvprofError> {
    let defs = LoadArgs::augment_args(clap::Command::new("load"));
    let mut given: Vec<(usize, Vec<String>)> = Vec::new();
    for arg in defs.get_arguments() {
        let id = arg.get_id().as_str();
        if matches!(id, "start_at" | "run_id")
            || matches.value_source(id) != Some(ValueSource::CommandLine)
        {
            continue;
        }
        let long = format!(
            "--{}",
            arg.get_long().expect("every load option has a long name")
        );
        let indices: Vec<usize> = matches.indices_of(id).into_iter().flatten().collect();
        match arg.get_action() {
            ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count => {
                for &i in &indices {
                    given.push((i, vec![long.clone()]));
                }
            }
            _ => {
                let occurrences = matches.get_raw_occurrences(id).into_iter().flatten();
                let mut at = indices.iter();
                for values in occurrences {
                    let mut words = vec![long.clone()];
                    for v in values {
                        words.push(v.to_str().map(str::to_string).ok_or_else(|| {
                            SrvprofError::Usage(format!(
                                "{long} has a value that is not UTF-8; give it in UTF-8"
                            ))
                        })?);
                    }
                    // A value starting with - (typed --header=-x) stays one word, or srvprof
                    // would read it as an option.
                    if words.len() == 2 && words[1].starts_with('-') {
                        words = vec![format!("{}={}", words[0], words[1])];
                    }
                    given.push((at.next().copied().unwrap_or(usize::MAX), words));
                }
            }
        }
    }
    given.sort_by_key(|(i, _)| *i);
    Ok(given.into_iter().flat_map(|(_, w)| w).collect())
}

/// `$` doubled: Kubernetes reads `$(NAME)` in command, args and env values as a variable and `$$`
/// as `$`, so this passes a value through as it is.
fn k8s_verbatim(text: &str) -> String {
    text.replace('$', "$$")
}

fn k8s_list(words: &[String]) -> String {
    yaml(&json!(
        words.iter().map(|w| k8s_verbatim(w)).collect::<Vec<_>>()
    ))
}

/// Replaces every `{{KEY}}` of `template`, in one pass: a value holding `{{KEY}}` stays text.
pub fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let (key, after) = rest[at + 2..]
            .split_once("}}")
            .expect("a placeholder closes");
        let value = values.iter().find(|(k, _)| *k == key);
        out.push_str(
            &value
                .unwrap_or_else(|| panic!("no value for {{{{{key}}}}}"))
                .1,
        );
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The two manifests: the load agents' Indexed Job and the probes' DaemonSet.
pub fn kubernetes(plan: &Plan, args: &PlanArgs) -> Result<(String, String), SrvprofError> {
    let usage = |s: &str| SrvprofError::Usage(s.into());
    let Hosts::Count(hosts) = plan.hosts else {
        return Err(usage(
            "with --format kubernetes give --hosts a number: the scheduler places the agents, one per node",
        ));
    };
    if !args.servers.is_empty() {
        return Err(usage(
            "with --format kubernetes the probes run on the nodes labelled --server-label; leave --servers out",
        ));
    }
    let image = args.image.as_deref().ok_or_else(|| {
        usage("--format kubernetes needs --image: a container image with srvprof on its PATH, sh, and what --server-pids-from runs (pgrep: procps)")
    })?;
    validate::image(image)?;
    validate::namespace(&args.namespace)?;
    let (label_key, label_value) = validate::server_label(&args.server_label)?;
    let volume = match (&args.claim, &args.results) {
        (Some(claim), _) => {
            validate::claim(claim)?;
            format!(
                "\"persistentVolumeClaim\": {}",
                yaml(&json!({ "claimName": claim }))
            )
        }
        (None, results) => {
            let path = results.as_deref().unwrap_or("/var/lib/srvprof");
            validate::results(path)?;
            if !path.starts_with('/') {
                return Err(SrvprofError::Usage(format!(
                    "--results {path}: with --format kubernetes it is a folder on each node and must be absolute, e.g. /var/lib/srvprof"
                )));
            }
            format!(
                "\"hostPath\": {}",
                yaml(&json!({ "path": path, "type": "DirectoryOrCreate" }))
            )
        }
    };
    let s = |text: &str| yaml(&json!(text));
    let common = [
        ("NAMESPACE", s(&args.namespace)),
        ("RUN_LABEL", s(&plan.slug)),
        ("RUN_ID", s(&plan.run_id)),
        ("IMAGE", s(image)),
        ("SERVER_LABEL", s(&args.server_label)),
        ("SERVER_LABEL_KEY", s(label_key)),
        ("SERVER_LABEL_VALUE", s(label_value)),
        ("RESULTS", s(&format!("{MOUNT}/{}", plan.slug))),
        ("VOLUME", volume),
    ];
    let mut job = common.to_vec();
    job.extend([
        ("LOAD_NAME", s(&format!("srvprof-load-{}", plan.slug))),
        ("HOSTS", hosts.to_string()),
        ("HOSTS_TEXT", s(&hosts.to_string())),
        ("START_AT", s(&plan.start.to_rfc3339())),
        ("LOAD_ARGS", k8s_list(&plan.load_args)),
    ]);
    let mut daemonset = common.to_vec();
    daemonset.extend([
        ("PROBE_NAME", s(&format!("srvprof-probe-{}", plan.slug))),
        ("PROBE_START_AT", s(&plan.probe_start.to_rfc3339())),
        ("SERVER_PIDS_FROM", s(&k8s_verbatim(&args.server_pids_from))),
        ("PROBE_ARGS", k8s_list(&plan.probe_args)),
    ]);
    Ok((
        fill(JOB_TEMPLATE, &job),
        fill(DAEMONSET_TEMPLATE, &daemonset),
    ))
}

/// The launcher's words before the remote command, for `host`.
fn launcher(format: PlanFormat, host: &str) -> String {
    let host = shell_word(host);
    match format {
        // -- ends ssh's options: nothing after it is read as one.
        PlanFormat::Ssh => format!("ssh -- {host}"),
        PlanFormat::Pdsh => format!("pdsh -w {host}"),
        PlanFormat::Ansible => format!("ansible {host} -m ansible.builtin.shell -a"),
        PlanFormat::Kubernetes => unreachable!("kubernetes renders manifests"),
    }
}

/// What an Ansible line passes through Ansible's own parsing: the URL, every load option's
/// value, the PIDs command and the folder, each with the name it was given by.
fn check_for_ansible(plan: &Plan, args: &PlanArgs, results: &str) -> Result<(), SrvprofError> {
    validate::for_ansible("the URL", &args.url)?;
    let mut option = "";
    for word in &plan.load_args[1..] {
        match word.split_once('=') {
            Some((name, value)) if word.starts_with("--") => {
                validate::for_ansible(name, value)?;
            }
            _ if word.starts_with("--") => option = word,
            _ => validate::for_ansible(option, word)?,
        }
    }
    validate::for_ansible("--server-pids-from", &args.server_pids_from)?;
    validate::for_ansible("--results", results)
}

/// The run as a shell script of ssh, pdsh or Ansible lines: a probe per server host, an agent
/// per client host with its segment, all in the background; then their folders fetched and
/// merged. Every value is one shell word, but for --server-pids-from, which is shell.
pub fn script(plan: &Plan, args: &PlanArgs) -> Result<String, SrvprofError> {
    let format = match args.format {
        PlanFormat::Ssh => "ssh",
        PlanFormat::Pdsh => "pdsh",
        PlanFormat::Ansible => "ansible",
        PlanFormat::Kubernetes => unreachable!("kubernetes renders manifests"),
    };
    let Hosts::Names(clients) = &plan.hosts else {
        return Err(SrvprofError::Usage(format!(
            "--format {format} needs the client hosts' names: --hosts a,b,c"
        )));
    };
    if args.servers.is_empty() {
        return Err(SrvprofError::Usage(format!(
            "--format {format} needs the server hosts' names: --servers HOST,..."
        )));
    }
    if args.claim.is_some() {
        return Err(SrvprofError::Usage(format!(
            "--claim is a Kubernetes volume; with --format {format} give --results DIR"
        )));
    }
    for client in clients {
        validate::host("--hosts", client)?;
    }
    for server in &args.servers {
        validate::host("--servers", server)?;
    }
    let results = args.results.as_deref().unwrap_or("srvprof-runs");
    validate::results(results)?;
    if args.format == PlanFormat::Ansible {
        check_for_ansible(plan, args, results)?;
    }
    let remote_dir = format!("{results}/{}", plan.slug);
    let n = clients.len();
    // Only checked values in the comments: a line break there would start a command.
    let mut out = format!(
        "# srvprof plan: run {} over {n} client host(s) and {} server host(s), with {format}.\n\
         # The agents start at {}; the probes watch from {}.\n\
         # Every host needs srvprof on its PATH and a synchronised clock (chronyc tracking); the\n\
         # servers need sudo for the probes. Run this (sh {SCRIPT_FILE}) well before the start:\n\
         # a host started after it is refused.\n",
        plan.run_id,
        args.servers.len(),
        plan.start.to_rfc3339(),
        plan.probe_start.to_rfc3339(),
    );
    let mut lines = Vec::new();
    let mut folders = Vec::new();
    for server in &args.servers {
        let dir = format!("{remote_dir}/server-{server}");
        let mut words = plan.probe_args.clone();
        words.extend(["--out".into(), dir.clone()]);
        let remote = format!(
            "sudo srvprof probe --pid $({}) {}",
            args.server_pids_from,
            shell_words(&words)
        );
        lines.push((server, remote));
        folders.push((server.clone(), dir));
    }
    for (i, client) in clients.iter().enumerate() {
        let dir = format!("{remote_dir}/client-{}", i + 1);
        let mut words = vec!["srvprof".to_string(), "load".to_string()];
        words.extend(plan.load_args.iter().cloned());
        words.extend([
            "--segment".into(),
            format!("{}/{n}", i + 1),
            "--out".into(),
            dir.clone(),
        ]);
        lines.push((client, shell_words(&words)));
        folders.push((client.clone(), dir));
    }
    for (host, remote) in lines {
        // Each value was checked alone; this catches a delimiter two of them make together.
        if args.format == PlanFormat::Ansible
            && ["{{", "{%", "{#"].iter().any(|d| remote.contains(d))
        {
            return Err(SrvprofError::Usage(format!(
                "the Ansible command for {host} would hold a Jinja2 delimiter ({{{{, {{% or {{#); use --format ssh or pdsh"
            )));
        }
        let launcher = launcher(args.format, host);
        out.push_str(&format!("{launcher} {} &\n", shell_word(&remote)));
    }
    out.push_str("wait\n");
    let local = plan.slug.clone();
    out.push_str(&format!("mkdir -p {}\n", shell_word(&local)));
    let mut merged = vec!["srvprof".to_string(), "merge".to_string()];
    for (host, dir) in &folders {
        let name = dir.rsplit('/').next().unwrap_or(dir);
        // -- ends scp's options; the host and folder are checked, for the remote shell too.
        out.push_str(&format!(
            "scp -r -- {} {}\n",
            shell_word(&format!("{host}:{dir}")),
            shell_word(&format!("{local}/"))
        ));
        merged.push(format!("{local}/{name}"));
    }
    merged.extend(["--out".into(), format!("{local}/merged")]);
    out.push_str(&shell_words(&merged));
    out.push('\n');
    Ok(out)
}

/// `srvprof plan`: prints the run's manifests or script, or writes them to `--out DIR`.
pub fn run(args: &PlanArgs, matches: &ArgMatches) -> Result<(), SrvprofError> {
    let plan = Plan::new(args, given_load_options(matches)?)?;
    let files: Vec<(&str, String)> = match args.format {
        PlanFormat::Kubernetes => {
            let (job, daemonset) = kubernetes(&plan, args)?;
            vec![(JOB_FILE, job), (DAEMONSET_FILE, daemonset)]
        }
        PlanFormat::Ssh | PlanFormat::Pdsh | PlanFormat::Ansible => {
            vec![(SCRIPT_FILE, script(&plan, args)?)]
        }
    };
    match &args.out {
        None => {
            let texts: Vec<&str> = files.iter().map(|(_, t)| t.as_str()).collect();
            print!("{}", texts.join("---\n"));
        }
        Some(dir) => write(dir, &files)?,
    }
    if !plan.redacted.is_empty() {
        eprintln!(
            "srvprof: the plan holds no secret: it reads {}; put the real values in your copy (a Kubernetes Secret, the hosts' own script) before you run it",
            plan.redacted.join(", ")
        );
    }
    Ok(())
}

fn write(dir: &Path, files: &[(&str, String)]) -> Result<(), SrvprofError> {
    let out = crate::output::open_dir(dir)?;
    for (name, text) in files {
        crate::output::write_atomic(&out, name, text.as_bytes(), false)?;
        eprintln!("wrote {}", out.join(name).display());
    }
    out.finish().map_err(|e| crate::output::write_err(dir, e))
}

#[cfg(test)]
mod hostile_input_tests;
#[cfg(test)]
mod manifest_security_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    /// `srvprof plan ARGS...` as the binary parses it: the options and the plan's own matches.
    pub(super) fn parsed(argv: &[&str]) -> (PlanArgs, ArgMatches) {
        let argv = ["srvprof", "plan"].iter().chain(argv);
        let matches = Cli::command_line()
            .try_get_matches_from(argv)
            .expect("parses");
        let cli: Cli = clap::FromArgMatches::from_arg_matches(&matches).expect("parses");
        let Command::Plan(args) = cli.command else {
            panic!("not plan")
        };
        (args, matches.subcommand_matches("plan").unwrap().clone())
    }

    pub(super) fn plan_of(argv: &[&str]) -> Result<(Plan, PlanArgs), SrvprofError> {
        // A value the command line itself refuses (a URL that is none) is refused as srvprof
        // says it: the first line of clap's message.
        let full = ["srvprof", "plan"].iter().chain(argv);
        if let Err(e) = Cli::command_line().try_get_matches_from(full) {
            let text = e.to_string();
            return Err(SrvprofError::Usage(
                text.lines().next().unwrap_or_default().into(),
            ));
        }
        let (args, matches) = parsed(argv);
        Plan::new(&args, given_load_options(&matches)?).map(|p| (p, args))
    }

    /// A rendered srvprof command line, as srvprof parses it.
    pub(super) fn srvprof_command(words: &[String]) -> Command {
        Cli::try_parse_from(words)
            .unwrap_or_else(|e| panic!("{words:?}: {e}"))
            .command
    }

    const OPTIONS: &[&str] = &[
        "http://server:8080/",
        "-c",
        "3000",
        "--rate",
        "20000",
        "-d",
        "60s",
        "--warmup",
        "5s",
        "-H",
        "X-Quote: it's \"$(x)\"",
        "--server-pids-from",
        "pgrep -d' ' nginx",
    ];

    fn with(extra: &[&'static str]) -> Vec<&'static str> {
        OPTIONS.iter().chain(extra).copied().collect()
    }

    #[test]
    fn the_load_options_pass_through_as_given_with_one_absolute_start_and_run_id() {
        let (plan, _) = plan_of(&with(&["--hosts", "3", "--start-at", "+2m"])).unwrap();
        assert_eq!(
            plan.load_args[..11],
            [
                "http://server:8080/",
                "--connections",
                "3000",
                "--rate",
                "20000",
                "--duration",
                "60s",
                "--warmup",
                "5s",
                "--header",
                "X-Quote: it's \"$(x)\"",
            ]
        );
        let start = plan.start.to_rfc3339();
        assert!(start.ends_with('Z') && !start.starts_with('+'), "{start}");
        assert_eq!(
            plan.load_args[11..],
            ["--start-at", &start, "--run-id", &plan.run_id]
        );
        assert_eq!(plan.run_id, format!("start-{start}"));
        // The probes watch the measured window: after the 5 s warm-up, for -d, on the same grid.
        assert_eq!(
            plan.probe_start.0.duration_since(plan.start.0).unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(plan.probe_args[..4], ["-d", "60s", "--interval", "1s"]);
        let (given, _) = plan_of(&with(&[
            "--hosts",
            "2",
            "--start-at",
            "+1m",
            "--run-id",
            "n7",
        ]))
        .unwrap();
        assert_eq!((given.run_id.as_str(), given.slug.as_str()), ("n7", "n7"));
    }

    #[test]
    fn the_plan_writes_no_secret_in_its_manifests_or_scripts() {
        let secret = [
            "http://user:s3cret@server:8080/",
            "-H",
            "Authorization: Bearer s3cret",
            "-H",
            "X-Trace: on",
            "--remote-write",
            "http://mimir/api/v1/push?api_key=s3cret",
            "--server-pids-from",
            "pgrep nginx",
            "--start-at",
            "+2m",
        ];
        for format in ["kubernetes", "ssh", "pdsh", "ansible"] {
            let mut argv = secret.to_vec();
            argv.extend(["--format", format]);
            match format {
                "kubernetes" => argv.extend(["--hosts", "2", "--image", "img"]),
                _ => argv.extend(["--hosts", "a,b", "--servers", "s1"]),
            }
            let (plan, args) = plan_of(&argv).unwrap();
            let text = match format {
                "kubernetes" => {
                    let (job, daemonset) = kubernetes(&plan, &args).unwrap();
                    job + &daemonset
                }
                _ => script(&plan, &args).unwrap(),
            };
            assert!(!text.contains("s3cret"), "{format}:\n{text}");
            assert!(text.contains("X-Trace: on"), "{format}:\n{text}");
            assert!(
                text.contains("Authorization: <redacted>"),
                "{format}:\n{text}"
            );
            assert_eq!(
                plan.redacted,
                [
                    "the URL http://<redacted>@server:8080/",
                    "--header Authorization: <redacted>",
                    "--remote-write http://mimir/api/v1/push?api_key=<redacted>",
                ]
            );
        }
    }

    #[test]
    fn the_indexed_job_has_n_completions_and_every_manifest_one_start() {
        let (plan, args) = plan_of(&with(&[
            "--hosts",
            "4",
            "--start-at",
            "+2m",
            "--image",
            "registry.example/srvprof:1",
        ]))
        .unwrap();
        let (job, daemonset) = kubernetes(&plan, &args).unwrap();
        for text in [&job, &daemonset] {
            assert!(!text.contains("{{"), "a placeholder is left:\n{text}");
        }
        for line in [
            "completionMode: Indexed",
            "completions: 4",
            "parallelism: 4",
        ] {
            assert!(job.contains(&format!("\n  {line}\n")), "{line}:\n{job}");
        }
        assert!(job.contains("value: \"4\""), "HOSTS:\n{job}");
        assert!(job.contains("JOB_COMPLETION_INDEX + 1"));
        let start = plan.start.to_rfc3339();
        let args_line = |text: &str| -> Vec<String> {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with("args: "))
                .unwrap();
            serde_json::from_str(line.trim_start().trim_start_matches("args: ")).unwrap()
        };
        let load: Vec<String> = args_line(&job);
        assert_eq!(load.iter().filter(|a| *a == &start).count(), 1);
        // $ doubled: Kubernetes gives the agent the header as typed.
        assert!(
            load.contains(&"X-Quote: it's \"$$(x)\"".to_string()),
            "{load:?}"
        );
        let probe: Vec<String> = args_line(&daemonset);
        assert!(probe.contains(&plan.probe_start.to_rfc3339()) && probe.contains(&plan.run_id));
        assert!(daemonset.contains("hostPID: true") && daemonset.contains("privileged: false"));
        assert!(
            daemonset.contains("value: \"pgrep -d' ' nginx\""),
            "{daemonset}"
        );
        // Each agent's command line, as the pod's shell makes it, parses as srvprof's.
        let mut words = vec!["srvprof".to_string(), "load".to_string()];
        words.extend(load.iter().map(|w| w.replace("$$", "$")));
        words.extend([
            "--segment".into(),
            "4/4".into(),
            "--out".into(),
            "/srvprof/x".into(),
        ]);
        match srvprof_command(&words) {
            Command::Load(l) => assert_eq!(l.load.segment.unwrap().to_string(), "4/4"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_ssh_pdsh_and_ansible_lines_give_segments_1_to_n_once_each_and_parse_as_srvprofs() {
        for format in ["ssh", "pdsh", "ansible"] {
            let (plan, args) = plan_of(&with(&[
                "--hosts",
                "a,b,c",
                "--servers",
                "s1,s2",
                "--start-at",
                "+2m",
                "--format",
                format,
            ]))
            .unwrap();
            let text = script(&plan, &args).unwrap();
            let (mut segments, mut starts, mut probes) = (Vec::new(), Vec::new(), 0);
            let mut merged = None;
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let words = shlex::split(line).unwrap_or_else(|| panic!("{line}"));
                let (host, remote) = match (format, words[0].as_str()) {
                    ("ssh", "ssh") => {
                        assert_eq!(words[1], "--");
                        (words[2].clone(), words[3].clone())
                    }
                    ("pdsh", "pdsh") => {
                        assert_eq!(words[1], "-w");
                        (words[2].clone(), words[3].clone())
                    }
                    ("ansible", "ansible") => {
                        assert_eq!(words[2..5], ["-m", "ansible.builtin.shell", "-a"]);
                        (words[1].clone(), words[5].clone())
                    }
                    (_, "srvprof") => {
                        merged = Some(srvprof_command(&words));
                        continue;
                    }
                    _ => continue,
                };
                // The PIDs as the server's shell finds them.
                let remote = remote.replace("$(pgrep -d' ' nginx)", "41 42");
                let mut words = shlex::split(&remote).unwrap();
                if words[0] == "sudo" {
                    words.remove(0);
                }
                match srvprof_command(&words) {
                    Command::Load(l) => {
                        segments.push((l.load.segment.unwrap().to_string(), host));
                        starts.push(l.load.start_at.unwrap());
                        assert_eq!(l.load.run_id.as_deref(), Some(plan.run_id.as_str()));
                    }
                    Command::Probe(p) => {
                        probes += 1;
                        assert_eq!(p.pids, [41, 42]);
                        assert_eq!(p.start_at, Some(plan.probe_start));
                        assert_eq!(p.run_id.as_deref(), Some(plan.run_id.as_str()));
                    }
                    other => panic!("{other:?}"),
                }
            }
            segments.sort();
            let expected: Vec<(String, String)> = ["a", "b", "c"]
                .iter()
                .enumerate()
                .map(|(i, h)| (format!("{}/3", i + 1), h.to_string()))
                .collect();
            assert_eq!(segments, expected, "{text}");
            assert!(starts.iter().all(|s| *s == plan.start), "{starts:?}");
            assert_eq!(probes, 2);
            match merged {
                Some(Command::Merge { dirs, .. }) => assert_eq!(dirs.len(), 5),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn each_mistake_is_one_sentence_saying_what_to_do() {
        let err = |extra: &[&'static str]| {
            match plan_of(&with(extra)) {
                Ok((plan, args)) => match args.format {
                    PlanFormat::Kubernetes => kubernetes(&plan, &args).map(|_| ()),
                    _ => script(&plan, &args).map(|_| ()),
                },
                Err(e) => Err(e),
            }
            .unwrap_err()
            .to_string()
        };
        let cases: &[(&[&'static str], &str)] = &[
            (&["--hosts", "3"], "plan needs --start-at"),
            (
                &["--hosts", "3", "--start-at", "2020-01-01T00:00:00Z"],
                "still ahead",
            ),
            (&["--hosts", "3", "--start-at", "+1m"], "needs --image"),
            (
                &["--hosts", "3", "--start-at", "+1m", "--segment", "1/3"],
                "leave --segment out",
            ),
            (
                &["--hosts", "3", "--start-at", "+1m", "--hdr-log", "x"],
                "leave it out",
            ),
            (
                &["--hosts", "a,b", "--start-at", "+1m", "--image", "i"],
                "--hosts a number",
            ),
            (
                &["--hosts", "2", "--start-at", "+1m", "--format", "ssh"],
                "names: --hosts a,b,c",
            ),
            (
                &["--hosts", "a", "--start-at", "+1m", "--format", "pdsh"],
                "--servers HOST",
            ),
            (
                &[
                    "--hosts",
                    "2",
                    "--start-at",
                    "+1m",
                    "--image",
                    "i",
                    "--results",
                    "rel",
                ],
                "absolute",
            ),
            (
                &[
                    "--hosts",
                    "2",
                    "--start-at",
                    "+1m",
                    "--image",
                    "i",
                    "--server-label",
                    "x",
                ],
                "KEY=VALUE",
            ),
        ];
        for (extra, says) in cases {
            let e = err(extra);
            assert!(e.contains(says) && !e.contains('\n'), "{extra:?}: {e}");
        }
        let n_alone = [
            "http://s/",
            "-n",
            "100",
            "--hosts",
            "2",
            "--start-at",
            "+1m",
        ];
        let n_alone = n_alone.iter().chain(&["--server-pids-from", "x"]).copied();
        let (args, matches) = parsed(&n_alone.collect::<Vec<_>>());
        let e = Plan::new(&args, given_load_options(&matches).unwrap()).unwrap_err();
        assert!(e.to_string().contains("give -d"), "{e}");
        // A bad load option is clap's own refusal, as `srvprof load` gives it.
        let argv = [
            "srvprof",
            "plan",
            "http://s/",
            "--hosts",
            "2",
            "--rate",
            "fast",
        ];
        assert!(
            Cli::try_parse_from(argv)
                .unwrap_err()
                .to_string()
                .contains("--rate")
        );
    }

    #[test]
    fn a_run_id_becomes_a_name_kubernetes_and_folders_take() {
        assert_eq!(
            slug("start-2026-11-29T10:00:00.000Z"),
            "start-2026-11-29t10-00-00-000z"
        );
        assert_eq!(slug("--Nightly run #7--"), "nightly-run-7");
        assert_eq!(slug("::"), "run");
        assert!(slug(&"x".repeat(100)).len() <= 40);
    }
}
