//! `srvprof plan` given hostile values: each is refused in one sentence before anything is
//! rendered, or reaches srvprof exactly as typed. The ssh, pdsh and Ansible scripts are run by
//! bash against fake launchers that record their argv and behave as the real ones read theirs
//! (ssh's options, Ansible's templating); the manifests are parsed as Kubernetes parses YAML.

use std::path::PathBuf;
use std::process::Command as Process;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use serde_norway::Value as Yaml;

use super::tests::{plan_of, srvprof_command};
use super::*;
use crate::cli::Command;

/// What an attacker's value does if it escapes: this file appears in the script's folder.
const MARKER: &str = "pwned";

/// The shell helpers every fake launcher sources.
const LIB: &str = r#"
record() { f=$(mktemp "$CALLS/call.XXXXXX"); printf '%s\0' "$@" >"$f"; }
# As ssh and scp read their options: -oKEY=VALUE or -o KEY=VALUE, other flags, -- ends them. A
# ProxyCommand runs on this machine, as ssh runs it. ARGS is what follows the options.
ssh_options() {
    while [ $# -gt 0 ]; do
        opt=
        case $1 in
            --) shift; break ;;
            -o) opt=$2; shift 2 ;;
            -o*) opt=${1#-o}; shift ;;
            -*) shift ;;
            *) break ;;
        esac
        case $opt in [Pp]roxy[Cc]ommand=*) sh -c "${opt#*=}" ;; esac
    done
    ARGS=("$@")
}
"#;

/// Each fake launcher: its name and its body after `. lib.sh`.
const FAKES: &[(&str, &str)] = &[
    // The remote side: ssh joins the words after the host with spaces for the login shell.
    (
        "ssh",
        r#"record ssh "$@"; ssh_options "$@"; set -- "${ARGS[@]}"; shift; exec bash -c "$*""#,
    ),
    ("scp", r#"record scp "$@"; ssh_options "$@""#),
    // pdsh's ssh module hands each host of -w to ssh, with no -- before it.
    (
        "pdsh",
        r#"record pdsh "$@"; [ "$1" = -w ] || exit 64; hosts=$2; shift 2
        IFS=, read -ra each <<<"$hosts"
        for h in "${each[@]}"; do
            ( ssh_options "$h" "$@"; set -- "${ARGS[@]}"; shift; bash -c "$*" )
        done"#,
    ),
    // Ansible renders -a as a Jinja2 template on the controller, so any of its delimiters is
    // code run here; the shell module then runs the string with sh.
    (
        "ansible",
        r#"record ansible "$@"; [ "$2 $3 $4" = "-m ansible.builtin.shell -a" ] || exit 64
        case $5 in *'{{'*|*'{%'*|*'{#'*) touch pwned ;; esac
        exec sh -c "$5""#,
    ),
    ("sudo", r#"record sudo "$@"; exec "$@""#),
    ("srvprof", r#"record srvprof "$@""#),
];

/// A fresh folder: bin/ with the fake launchers, calls/ for their records, work/ to run in.
struct Sandbox {
    root: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "srvprof-plan-hostile-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        for dir in ["bin", "calls", "work"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("bin/lib.sh"), LIB).unwrap();
        for (name, body) in FAKES {
            let path = root.join("bin").join(name);
            std::fs::write(
                &path,
                format!("#!/bin/bash\n. \"${{0%/*}}/lib.sh\"\n{body}\n"),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Sandbox { root }
    }

    /// Runs `script` with bash in work/, the fakes first on PATH: every recorded argv, and
    /// whether the marker file was made.
    fn run(&self, script: &str) -> (Vec<Vec<String>>, bool) {
        let file = self.root.join("run.sh");
        std::fs::write(&file, script).unwrap();
        let path = format!(
            "{}:{}",
            self.root.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Process::new("bash")
            .arg(&file)
            .current_dir(self.root.join("work"))
            .env("PATH", path)
            .env("CALLS", self.root.join("calls"))
            .output()
            .expect("bash");
        assert!(out.status.success(), "bash {}: {out:?}", file.display());
        let mut calls = Vec::new();
        for entry in std::fs::read_dir(self.root.join("calls")).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            let text = String::from_utf8(bytes).unwrap();
            let mut words: Vec<String> = text.split('\0').map(str::to_string).collect();
            assert_eq!(words.pop().as_deref(), Some(""), "a NUL ends each word");
            calls.push(words);
        }
        calls.sort();
        (calls, self.root.join("work").join(MARKER).exists())
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// `srvprof plan ARGV` rendered as `srvprof plan` renders it: the files' texts, or its refusal.
fn render(argv: &[&str]) -> Result<Vec<String>, SrvprofError> {
    let (plan, args) = plan_of(argv)?;
    match args.format {
        PlanFormat::Kubernetes => kubernetes(&plan, &args).map(|(j, d)| vec![j, d]),
        _ => script(&plan, &args).map(|s| vec![s]),
    }
}

/// A plan's options with the given format, hosts and extras after them; a
/// --server-pids-from or --image among the extras replaces the default one.
fn argv<'a>(format: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut argv = vec!["http://server:8080/", "-d", "30s", "--start-at", "+5m"];
    if !extra.iter().any(|a| a.starts_with("--server-pids-from")) {
        argv.extend(["--server-pids-from", "echo 41 42"]);
    }
    argv.extend(["--format", format]);
    if format == "kubernetes" {
        argv.extend(["--hosts", "2"]);
        if !extra.iter().any(|a| a.starts_with("--image")) {
            argv.extend(["--image", "registry.example/srvprof:1"]);
        }
    }
    argv.extend(extra);
    argv
}

/// Renders `argv` and expects a refusal naming `option` in one line. A script that renders
/// anyway is run first, so what the value would have done shows in the failure.
fn refused(argv: &[&str], option: &str) {
    let result = render(argv);
    if let Ok(texts) = &result {
        // One text is a script: run it. Two are the manifests: parse them.
        match &texts[..] {
            [script] => {
                let (calls, pwned) = Sandbox::new().run(script);
                assert!(!pwned, "{argv:?} ran code: {MARKER} made; calls {calls:?}");
            }
            manifests => {
                for text in manifests {
                    let doc: Yaml = serde_norway::from_str(text)
                        .unwrap_or_else(|e| panic!("{argv:?} broke the YAML ({e}):\n{text}"));
                    let keys = keys(&doc);
                    assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec"], "{argv:?}");
                }
            }
        }
    }
    let text = match result {
        Ok(texts) => panic!(
            "{argv:?} was rendered, not refused:\n{}",
            texts.join("---\n")
        ),
        Err(e) => e.to_string(),
    };
    assert!(
        text.contains(option) && !text.contains(['\n', '\r', '\u{2028}', '\u{85}']),
        "{argv:?}: {text}"
    );
}

#[test]
fn a_run_id_with_a_line_break_or_shell_in_it_is_refused_before_anything_renders() {
    for format in ["ssh", "pdsh", "ansible", "kubernetes"] {
        for id in [
            "x\ntouch pwned\n#",
            "x\rtouch pwned",
            "a\u{2028}pwned: true",
            "a\u{85}pwned: true",
            "$(touch pwned)",
            "`touch pwned`",
            "a;touch pwned",
            "it's",
            "-oProxyCommand=touch pwned",
            "{{ lookup('pipe','touch pwned') }}",
        ] {
            let hosts: &[&str] = if format == "kubernetes" {
                &[]
            } else {
                &["--hosts", "a,b", "--servers", "s1"]
            };
            // With =, as a value that starts with a dash must be typed.
            let id = format!("--run-id={id}");
            let mut a = argv(format, hosts);
            a.push(&id);
            refused(&a, "--run-id");
        }
    }
}

#[test]
fn a_host_that_would_be_read_as_an_option_is_refused() {
    for format in ["ssh", "pdsh", "ansible"] {
        for (option, hosts, servers) in [
            ("--hosts", "-oProxyCommand=touch pwned,b", "s1"),
            ("--servers", "a,b", "-oProxyCommand=touch pwned"),
            ("--hosts", "a;touch pwned,b", "s1"),
            ("--servers", "a", "s1 -oProxyCommand=touch pwned"),
            ("--hosts", "a\ntouch pwned,b", "s1"),
        ] {
            let hosts = format!("--hosts={hosts}");
            let servers = format!("--servers={servers}");
            refused(&argv(format, &[&hosts, &servers]), option);
        }
    }
}

#[test]
fn ansible_is_never_handed_a_jinja_delimiter_nor_a_quote_it_reads_otherwise() {
    let hosts = ["--hosts", "a,b", "--servers", "s1"];
    for (extra, option) in [
        (
            &["-H", "X: {{ lookup('pipe','touch pwned') }}"][..],
            "--header",
        ),
        (&["-H", "X: {% if true %}{% endif %}"], "--header"),
        (&["--body", "{# c #}"], "--body"),
        (&["--body", "a\\"], "--body"),
        (&["--body", "line\nline"], "--body"),
        (&["--server-pids-from=echo {{ 41 }}"], "--server-pids-from"),
        (&["--results", "{{x}}"], "--results"),
    ] {
        refused(&argv("ansible", &[&hosts[..], extra].concat()), option);
    }
    let url = ["http://server:8080/{{ lookup('pipe','touch pwned') }}"];
    let mut a = argv("ansible", &hosts);
    a[0] = url[0];
    refused(&a, "URL");
}

#[test]
fn other_values_outside_their_alphabet_are_refused() {
    let scripts = ["--hosts", "a,b", "--servers", "s1"];
    for (format, extra, option) in [
        ("ssh", &["--results", "$(touch pwned)"][..], "--results"),
        ("ssh", &["--results=-x"], "--results"),
        ("pdsh", &["--results", "a b"], "--results"),
        ("kubernetes", &["--results", "/a\u{2028}b"], "--results"),
        (
            "ssh",
            &["--server-pids-from=pgrep x\ntouch pwned"],
            "--server-pids-from",
        ),
        (
            "kubernetes",
            &["--server-pids-from=pgrep\u{2028}x"],
            "--server-pids-from",
        ),
        ("kubernetes", &["--image", "i\nkind: Secret"], "--image"),
        ("kubernetes", &["--image=-i"], "--image"),
        ("kubernetes", &["--namespace", "a b"], "--namespace"),
        ("kubernetes", &["--claim", "c\u{85}d"], "--claim"),
        (
            "kubernetes",
            &["--server-label", "a=b\u{2028}pwned: true"],
            "--server-label",
        ),
        ("kubernetes", &["--server-label", "a b=c"], "--server-label"),
    ] {
        let hosts: &[&str] = if format == "kubernetes" {
            &[]
        } else {
            &scripts
        };
        refused(&argv(format, &[hosts, extra].concat()), option);
    }
    // A URL that is an option of `srvprof load`'s, given after --.
    for format in ["ssh", "kubernetes"] {
        let hosts: &[&str] = if format == "kubernetes" {
            &[]
        } else {
            &scripts
        };
        let mut a = argv(format, hosts);
        a.remove(0);
        a.extend(["--", "--hdr-log=/tmp/pwned"]);
        refused(&a, "URL");
    }
}

/// Values an attacker picks that the scripts must carry through as they are.
const HOSTILE_HEADER: &str = "X-Evil: $(touch pwned) `touch pwned`; touch pwned | 'q' \"dq\" & <>";
const HOSTILE_BODY: &str = "{\"a\": \"$(touch pwned)\"}\n; touch pwned\u{2028}\u{85}\t#";

#[test]
fn hostile_load_options_reach_srvprof_exactly_as_typed_and_run_nothing() {
    for format in ["ssh", "pdsh", "ansible"] {
        let mut extra = vec![
            "--hosts",
            "a,user@b.example",
            "--servers",
            "s1,s2",
            "-H",
            HOSTILE_HEADER,
            // A value that starts with a dash, typed with =, stays a value.
            "--header=-oProxyCommand=touch pwned",
            "--results",
            "runs/x",
        ];
        if format != "ansible" {
            extra.extend(["-H", "X-Jinja: {{ lookup('pipe','touch pwned') }}"]);
            extra.extend(["--body", HOSTILE_BODY]);
        }
        let a = argv(format, &extra);
        let (plan, args) = plan_of(&a).unwrap();
        let text = script(&plan, &args).unwrap();
        let (calls, pwned) = Sandbox::new().run(&text);
        assert!(!pwned, "{format}: {MARKER} made:\n{text}");
        let n = 2;
        let mut intended: Vec<Vec<String>> = Vec::new();
        let words = |list: &[&str]| list.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        for server in ["s1", "s2"] {
            let dir = format!("runs/x/{}/server-{server}", plan.slug);
            let mut probe = words(&["srvprof", "probe", "--pid", "41", "42"]);
            probe.extend(plan.probe_args.iter().cloned());
            probe.extend(["--out".into(), dir.clone()]);
            intended.push([vec!["sudo".to_string()], probe.clone()].concat());
            intended.push(probe);
            intended.push(scp(server, &dir, &plan.slug));
            intended.push(launcher(format, server));
        }
        for (i, client) in ["a", "user@b.example"].iter().enumerate() {
            let dir = format!("runs/x/{}/client-{}", plan.slug, i + 1);
            let mut load = words(&["srvprof", "load"]);
            load.extend(plan.load_args.iter().cloned());
            load.extend(["--segment".into(), format!("{}/{n}", i + 1)]);
            load.extend(["--out".into(), dir.clone()]);
            intended.push(load);
            intended.push(scp(client, &dir, &plan.slug));
            intended.push(launcher(format, client));
        }
        let folders = ["server-s1", "server-s2", "client-1", "client-2"];
        let mut merge = words(&["srvprof", "merge"]);
        merge.extend(folders.iter().map(|f| format!("{}/{f}", plan.slug)));
        merge.extend(["--out".into(), format!("{}/merged", plan.slug)]);
        intended.push(merge);
        // The launchers' own argv carry the remote command: compared by parse below.
        let mut seen: Vec<Vec<String>> = calls
            .iter()
            .map(|c| match c[0].as_str() {
                "ssh" | "pdsh" | "ansible" => c[..c.len() - 1].to_vec(),
                _ => c.clone(),
            })
            .collect();
        seen.sort();
        intended.sort();
        assert_eq!(seen, intended, "{format}:\n{text}");
        // And srvprof reads each agent's options as they were typed.
        for call in calls.iter().filter(|c| c[..2] == ["srvprof", "load"]) {
            let Command::Load(load) = srvprof_command(call) else {
                panic!("{call:?}")
            };
            assert_eq!(load.url, "http://server:8080/");
            let mut headers = vec![HOSTILE_HEADER, "-oProxyCommand=touch pwned"];
            if format != "ansible" {
                headers.push("X-Jinja: {{ lookup('pipe','touch pwned') }}");
                assert_eq!(load.load.body.as_deref(), Some(HOSTILE_BODY));
            }
            assert_eq!(load.load.headers, headers, "{format}");
        }
    }
}

/// The fetch of one host's folder, as the script runs it.
fn scp(host: &str, dir: &str, slug: &str) -> Vec<String> {
    [
        "scp",
        "-r",
        "--",
        &format!("{host}:{dir}"),
        &format!("{slug}/"),
    ]
    .iter()
    .map(|w| w.to_string())
    .collect()
}

/// The launcher's words before the remote command, as the script runs them.
fn launcher(format: &str, host: &str) -> Vec<String> {
    let words: Vec<&str> = match format {
        "ssh" => vec!["ssh", "--", host],
        "pdsh" => vec!["pdsh", "-w", host],
        _ => vec!["ansible", host, "-m", "ansible.builtin.shell", "-a"],
    };
    words.iter().map(|w| w.to_string()).collect()
}

/// The top-level keys of a Kubernetes object.
fn keys(doc: &Yaml) -> Vec<String> {
    let map = doc.as_mapping().expect("a mapping");
    let mut keys: Vec<String> = map
        .keys()
        .map(|k| k.as_str().expect("a string key").to_string())
        .collect();
    keys.sort();
    keys
}

/// Every character YAML 1.1 or a shell reads as the end of a line.
const LINE_BREAKS: &str = "a\nb\rc\u{85}d\u{2028}e\u{2029}f";

#[test]
fn every_line_break_yaml_knows_stays_inside_its_scalar() {
    templates_hold(&format!("{LINE_BREAKS} pwned: true # \"q\" 'q'"));
}

#[test]
fn characters_yaml_allows_only_escaped_stay_inside_their_scalar() {
    templates_hold("a\u{7f}b\u{9f}c\u{feff}d\u{fffe}e\u{1b}[2J");
}

#[test]
fn a_server_label_with_a_yaml_line_break_is_refused() {
    for breaks in ["\u{2028}", "\u{85}", "\u{2029}", "\n", "\r"] {
        let label = format!("srvprof/server=true{breaks}pwned: true");
        refused(
            &argv("kubernetes", &["--server-label", &label]),
            "--server-label",
        );
    }
}

/// Each template's placeholders all given `hostile`, comments included: the YAML still has its
/// own keys only, and each value reads back as the text.
fn templates_hold(hostile: &str) {
    let value = yaml(&json!(hostile));
    for (template, kind) in [(JOB_TEMPLATE, "Job"), (DAEMONSET_TEMPLATE, "DaemonSet")] {
        let names = [
            "HOSTS",
            "START_AT",
            "LOAD_NAME",
            "NAMESPACE",
            "RUN_LABEL",
            "RUN_ID",
            "IMAGE",
            "SERVER_LABEL",
            "SERVER_LABEL_KEY",
            "SERVER_LABEL_VALUE",
            "RESULTS",
            "HOSTS_TEXT",
            "PROBE_NAME",
            "PROBE_START_AT",
            "SERVER_PIDS_FROM",
        ];
        let mut values: Vec<(&str, String)> = names.iter().map(|n| (*n, value.clone())).collect();
        values.push(("LOAD_ARGS", yaml(&json!([hostile]))));
        values.push(("PROBE_ARGS", yaml(&json!([hostile]))));
        values.push(("VOLUME", format!("\"emptyDir\": {}", yaml(&json!({})))));
        let text = fill(template, &values);
        let doc: Yaml = serde_norway::from_str(&text)
            .unwrap_or_else(|e| panic!("{kind} does not parse ({e}):\n{text}"));
        assert_eq!(
            keys(&doc),
            ["apiVersion", "kind", "metadata", "spec"],
            "{text}"
        );
        assert_eq!(doc["kind"].as_str(), Some(kind));
        let metadata = &doc["metadata"];
        assert_eq!(metadata["name"].as_str(), Some(hostile));
        assert_eq!(
            metadata["annotations"]["srvprof/run-id"].as_str(),
            Some(hostile)
        );
        let pod = &doc["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(container["image"].as_str(), Some(hostile));
        assert_eq!(container["args"][0].as_str(), Some(hostile));
        if kind == "DaemonSet" {
            let selector = pod["nodeSelector"].as_mapping().unwrap();
            assert_eq!(selector.len(), 1, "{selector:?}");
            let (k, v) = selector.iter().next().unwrap();
            assert_eq!((k.as_str(), v.as_str()), (Some(hostile), Some(hostile)));
        }
    }
}

#[test]
fn a_placeholders_name_in_a_value_is_left_as_text() {
    let values = [
        ("RUN_ID", yaml(&json!("{{IMAGE}}"))),
        ("IMAGE", "\"i\"".to_string()),
    ];
    assert_eq!(
        fill("a: {{RUN_ID}}\nb: {{IMAGE}}\n", &values),
        "a: \"{{IMAGE}}\"\nb: \"i\"\n"
    );
}

#[test]
fn hostile_values_in_the_manifests_are_strings_kubernetes_passes_on_as_typed() {
    let mut a = argv(
        "kubernetes",
        &[
            "-H",
            HOSTILE_HEADER,
            "-H",
            "X-Breaks: a\u{2028}b\u{85}c",
            "--body",
            HOSTILE_BODY,
            "--header=-x",
            "--run-id",
            "nightly-7",
        ],
    );
    // A placeholder's name in a value stays that text.
    let pids_from = "pgrep {{PROBE_ARGS}} $(echo x) \"q\" 'q' # c";
    let at = a.iter().position(|w| *w == "echo 41 42").unwrap();
    a[at] = pids_from;
    let (plan, args) = plan_of(&a).unwrap();
    let (job, daemonset) = kubernetes(&plan, &args).unwrap();
    let job: Yaml = serde_norway::from_str(&job).unwrap_or_else(|e| panic!("{e}:\n{job}"));
    let daemonset: Yaml =
        serde_norway::from_str(&daemonset).unwrap_or_else(|e| panic!("{e}:\n{daemonset}"));
    for doc in [&job, &daemonset] {
        assert_eq!(keys(doc), ["apiVersion", "kind", "metadata", "spec"]);
        assert_eq!(
            doc["metadata"]["annotations"]["srvprof/run-id"],
            "nightly-7"
        );
    }
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    // Kubernetes reads $$ as $: the agent is given the values as typed.
    let given: Vec<String> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().replace("$$", "$"))
        .collect();
    let mut words = vec!["srvprof".to_string(), "load".to_string()];
    words.extend(given);
    let Command::Load(load) = srvprof_command(&words) else {
        panic!("{words:?}")
    };
    assert_eq!(
        load.load.headers,
        [HOSTILE_HEADER, "X-Breaks: a\u{2028}b\u{85}c", "-x"]
    );
    assert_eq!(load.load.body.as_deref(), Some(HOSTILE_BODY));
    let env = daemonset["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .unwrap();
    let pids = env
        .iter()
        .find(|e| e["name"] == "SERVER_PIDS_FROM")
        .unwrap();
    assert_eq!(
        pids["value"].as_str().map(|v| v.replace("$$", "$")),
        Some(pids_from.to_string())
    );
}
