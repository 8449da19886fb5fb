//! `srvprof plan`'s output checked as files, since no cluster runs here: the Kubernetes
//! manifests against the Kubernetes OpenAPI schema (PyPI's kubernetes-validate, which bundles
//! the schemas and reads no network), the DaemonSet's capabilities by running `srvprof probe`
//! with exactly those, and the ssh and pdsh scripts as shell whose srvprof lines the real binary
//! accepts.
//!
//! The validator is installed once into a venv under the target dir (pinned version), as
//! tests/hdr_log.rs fetches HdrHistogram's jar; `cargo xtask setup` installs python3-venv.
//! Without them the test fails: it never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use srvprof_integration::{assert_success, require_root, srvprof_bin, target_dir};

const VALIDATE_VERSION: &str = "1.37.0";

/// kubernetes-validate, installed once into target/kubernetes-validate/VERSION.
fn kubernetes_validate() -> PathBuf {
    let venv = target_dir()
        .join("kubernetes-validate")
        .join(VALIDATE_VERSION);
    let bin = venv.join("bin/kubernetes-validate");
    if bin.exists() {
        return bin;
    }
    let made = Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(&venv)
        .output();
    match made {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "cannot make a Python venv at {} ({}): install python3-venv (`cargo xtask setup` does)",
            venv.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!("cannot run python3 ({e}): install python3 and python3-venv"),
    }
    let out = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(format!("kubernetes-validate=={VALIDATE_VERSION}"))
        .output()
        .expect("the venv's pip");
    assert!(
        out.status.success() && bin.exists(),
        "cannot install kubernetes-validate {VALIDATE_VERSION} from PyPI into {}: this test needs PyPI ({})",
        venv.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    bin
}

/// kubernetes-validate --strict on `file`: unknown fields are errors.
fn validate(file: &Path) -> Output {
    Command::new(kubernetes_validate())
        .arg("--strict")
        .arg(file)
        .output()
        .unwrap()
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("srvprof-plan-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `srvprof plan URL [load options] ARGS... --out DIR`, which must succeed.
fn plan(dir: &Path, args: &[&str]) {
    let out = Command::new(srvprof_bin())
        .args([
            "plan",
            "http://server:8080/",
            "-c",
            "300",
            "--rate",
            "2000",
            "-d",
            "30s",
        ])
        .args(["--warmup", "2s", "-H", "X-Test: $(not run) \"quoted\""])
        .args(["--server-pids-from", "pgrep -d' ' nginx"])
        .args(args)
        .arg("--out")
        .arg(dir)
        .output()
        .unwrap();
    assert_success(&out);
}

#[test]
fn the_kubernetes_manifests_pass_the_openapi_schema_and_a_broken_one_fails() {
    let dir = fresh_dir("kubernetes");
    let image = ["--image", "registry.example/srvprof:1"];
    plan(
        &dir,
        &[&["--hosts", "3", "--start-at", "+10m"][..], &image].concat(),
    );
    let claim = dir.join("claim");
    let with_claim = [
        &["--hosts", "2", "--start-at", "+10m", "--claim", "results"][..],
        &image,
    ];
    plan(&claim, &with_claim.concat());
    for (folder, hosts) in [(&dir, 3), (&claim, 2)] {
        let job = folder.join("load-agents-job.yaml");
        let daemonset = folder.join("probe-daemonset.yaml");
        for (file, kind) in [(&job, "job"), (&daemonset, "daemonset")] {
            let out = validate(file);
            let text = said(&out);
            assert!(out.status.success(), "{}: {text}", file.display());
            // A kind the validator has no schema for is only a warning: each must be checked.
            assert!(
                text.contains(&format!("passed for resource {kind}/")),
                "{text}"
            );
            assert!(!text.contains("WARN") && !text.contains("ERROR"), "{text}");
        }
        let text = std::fs::read_to_string(&job).unwrap();
        assert!(text.contains(&format!("completions: {hosts}\n")), "{text}");
    }
    // The validator finds what Kubernetes would refuse: a misspelt field, a wrong type.
    let job = std::fs::read_to_string(dir.join("load-agents-job.yaml")).unwrap();
    let daemonset = std::fs::read_to_string(dir.join("probe-daemonset.yaml")).unwrap();
    for (name, text, from, to) in [
        ("misspelt.yaml", &job, "parallelism:", "paralelism:"),
        (
            "wrong-type.yaml",
            &daemonset,
            "hostPID: true",
            "hostPID: \"yes\"",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let broken = dir.join(name);
        std::fs::write(&broken, text.replacen(from, to, 1)).unwrap();
        let out = validate(&broken);
        assert!(!out.status.success(), "{name} passed: {}", said(&out));
        assert!(said(&out).contains("ERROR"), "{}", said(&out));
    }
}

/// The capabilities the DaemonSet's `add:` line gives the probe.
fn daemonset_capabilities(daemonset: &str) -> Vec<String> {
    let line = daemonset
        .lines()
        .find(|l| l.trim_start().starts_with("add: ["))
        .expect("an add: [...] line");
    let list = line
        .trim()
        .trim_start_matches("add: [")
        .trim_end_matches(']');
    list.split(',').map(|c| c.trim().to_lowercase()).collect()
}

/// `srvprof probe --stacks on` of `pid` with only `caps` (root's other capabilities dropped, as
/// in the pod), writing to `out`.
fn probe_with(caps: &[String], pid: u32, out: &Path) -> Output {
    let bounding: String = caps.iter().map(|c| format!(",+{c}")).collect();
    Command::new("setpriv")
        .arg(format!("--bounding-set=-all{bounding}"))
        .arg("--inh-caps=-all")
        .arg(srvprof_bin())
        .args(["probe", "--pid", &pid.to_string(), "-d", "1s", "--json"])
        .args(["--stacks", "on", "--out"])
        .arg(out)
        .output()
        .expect("setpriv (util-linux)")
}

#[test]
fn the_daemonsets_capabilities_are_enough_for_srvprof_probe_and_one_fewer_is_not() {
    require_root();
    let dir = fresh_dir("caps");
    plan(
        &dir,
        &["--hosts", "2", "--start-at", "+10m", "--image", "i"],
    );
    let daemonset = std::fs::read_to_string(dir.join("probe-daemonset.yaml")).unwrap();
    assert!(daemonset.contains("privileged: false") && daemonset.contains("drop: [ALL]"));
    let caps = daemonset_capabilities(&daemonset);
    assert_eq!(caps, ["bpf", "perfmon", "sys_ptrace"]);
    // A server of another user than the probe's, busy with syscalls.
    let mut server = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args([
            "sh",
            "-c",
            "while :; do cat /proc/self/stat >/dev/null; done",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let out = probe_with(&caps, server.id(), &dir.join("probe"));
    let fewer: Vec<String> = caps.iter().filter(|c| *c != "perfmon").cloned().collect();
    let without_perfmon = probe_with(&fewer, server.id(), &dir.join("fewer"));
    let _ = server.kill();
    let _ = server.wait();
    assert_success(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let syscalls = report["totals"]["syscalls"].as_u64().unwrap();
    assert!(
        syscalls > 100,
        "{syscalls} syscalls counted: {}",
        report["totals"]
    );
    // The stacks the plan's probes record: sampled, the server's own frames named.
    let folded = std::fs::read_to_string(dir.join("probe/oncpu-server.folded")).unwrap();
    assert!(
        folded
            .lines()
            .any(|l| l.starts_with("sh;") || l.starts_with("cat;")),
        "{folded}"
    );
    assert!(
        !without_perfmon.status.success(),
        "srvprof probe ran without PERFMON: the capability list is not the least it needs"
    );
}

#[test]
fn the_ssh_pdsh_and_ansible_scripts_are_shell_whose_srvprof_lines_the_binary_accepts() {
    // The probe lines are refused for want of privileges before their start is read.
    require_root();
    for format in ["ssh", "pdsh", "ansible"] {
        let dir = fresh_dir(format);
        let pids_from = format!("echo {}", std::process::id());
        let out = Command::new(srvprof_bin())
            .args([
                "plan",
                "http://127.0.0.1:9/",
                "-c",
                "6",
                "-d",
                "2s",
                "-H",
                "X-A: 'b' $c",
            ])
            .args(["--hosts", "a,b,c", "--servers", "s1", "--start-at", "+2s"])
            .args([
                "--format",
                format,
                "--server-pids-from",
                &pids_from,
                "--out",
            ])
            .arg(&dir)
            .output()
            .unwrap();
        assert_success(&out);
        let script = dir.join("run.sh");
        let syntax = Command::new("bash")
            .arg("-n")
            .arg(&script)
            .output()
            .unwrap();
        assert_success(&syntax);
        // Past the start, each srvprof line, run on this host, is read by srvprof's argument
        // parser and then refused for its start alone: one sentence, not clap's usage.
        std::thread::sleep(Duration::from_millis(2500));
        let stubs = r#"
            srvprof() { "$SRVPROF" "$@"; }; sudo() { "$@"; }; export -f srvprof sudo
            ssh() { [ "$1" = -- ] && shift; bash -c "$2" 2>"$LOGS/$1.err"; echo $? >"$LOGS/$1.status"; }
            pdsh() { shift; ssh "$@"; }
            ansible() { ssh "$1" "$5"; }
            scp() { :; }
            . "$SCRIPT"
        "#;
        let ran = Command::new("bash")
            .args(["-c", stubs])
            .env("SRVPROF", srvprof_bin())
            .env("LOGS", &dir)
            .env("SCRIPT", &script)
            .current_dir(&dir)
            .output()
            .unwrap();
        for host in ["s1", "a", "b", "c"] {
            let err = std::fs::read_to_string(dir.join(format!("{host}.err"))).unwrap();
            let status = std::fs::read_to_string(dir.join(format!("{host}.status"))).unwrap();
            assert_ne!(status.trim(), "0", "{format} {host}: {err}");
            assert!(
                !err.contains("Usage:") && err.contains("--start-at"),
                "{format} {host}: {err}"
            );
        }
        // The merge line too: parsed, then refused for the folders that were never fetched.
        let merge = String::from_utf8_lossy(&ran.stderr);
        assert!(
            merge.contains("srvprof: ") && !merge.contains("Usage:"),
            "{merge}"
        );
    }
}
