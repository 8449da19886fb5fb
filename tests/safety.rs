//! srvprof as root on a shared host, and on input someone else wrote, as a careful operator tries
//! it: nothing written through a link planted in an output folder, no folder of another user
//! taken, no run measured only to be lost, inputs read as regular files only, hostile latency
//! logs refused in one sentence instead of an abort or a panic.

use std::io::{Read, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use srvprof_integration::*;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("srvprof-safety-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `srvprof load URL -d 1s --run-id ID --out DIR`: a load agent's folder.
fn load_into(url: &str, dir: &Path) -> Output {
    Command::new(srvprof_bin())
        .args(["load", url, "-c", "2", "-d", "1s", "--warmup", "0s"])
        .args(["--run-id", "safety", "--interval", "200ms"])
        .arg("--out")
        .arg(dir)
        .output()
        .expect("srvprof load")
}

fn merge(dirs: &[&Path], out: &Path) -> Output {
    Command::new(srvprof_bin())
        .arg("merge")
        .args(dirs)
        .arg("--out")
        .arg(out)
        .output()
        .expect("srvprof merge")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A refusal: exit status 2 (srvprof's for bad input), no signal, no panic, one line.
fn assert_refused(out: &Output, says: &str) {
    let text = stderr(out);
    assert_eq!(out.status.signal(), None, "killed by a signal: {text}");
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(says), "expected {says:?} in: {text}");
    assert!(!text.contains("panicked"), "{text}");
    assert_eq!(text.trim_end().lines().count(), 1, "one sentence: {text}");
}

/// `load --out DIR` and `merge --out DIR` with a link planted at a name they write (load.json,
/// latency.hlog, and the old temporary name load.json.tmp): refused in a sentence before
/// anything is written, the file the link points at untouched; the temporary name, which srvprof
/// no longer uses, is left alone.
#[test]
fn load_and_merge_refuse_a_link_planted_in_their_folder_and_leave_its_target_alone() {
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let d = scratch("planted");
    let victim = d.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let agent = d.join("agent");
    std::fs::create_dir(&agent).unwrap();
    symlink(&victim, agent.join("load.json.tmp")).unwrap();
    for name in ["latency.hlog", "load.json"] {
        symlink(&victim, agent.join(name)).unwrap();
        let started = Instant::now();
        assert_refused(
            &load_into(&nginx.url(), &agent),
            "it is a symbolic link, which srvprof never follows",
        );
        assert!(
            started.elapsed() < Duration::from_millis(900),
            "refused before the load"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        std::fs::remove_file(agent.join(name)).unwrap();
    }
    assert_success(&load_into(&nginx.url(), &agent));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let merged = d.join("merged");
    std::fs::create_dir(&merged).unwrap();
    for name in ["latency.hlog", "load.json"] {
        symlink(&victim, merged.join(name)).unwrap();
        assert_refused(
            &merge(&[&agent], &merged),
            "it is a symbolic link, which srvprof never follows",
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(
            std::fs::read_dir(&merged).unwrap().count(),
            1,
            "nothing written before"
        );
        std::fs::remove_file(merged.join(name)).unwrap();
    }
    assert_success(&merge(&[&agent], &merged));
    assert!(merged.join("latency.hlog").is_file());
    std::fs::remove_dir_all(&d).unwrap();
}

/// The output folder is settled before anything is measured: a file where the folder should be
/// (run and probe), another user's folder, a link given with a trailing slash, are each refused
/// in a second, not after the run; a new folder exists, private (0700), while the run measures,
/// and is opened up to the user's umask once the run is complete.
#[test]
fn an_output_folder_is_settled_before_the_run_and_private_until_it_is_complete() {
    require_root();
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let d = scratch("out");
    let file = d.join("results");
    std::fs::write(&file, "mine").unwrap();
    let theirs = d.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(54_321), Some(54_321)).unwrap();
    std::fs::create_dir(d.join("elsewhere")).unwrap();
    symlink(d.join("elsewhere"), d.join("link")).unwrap();
    let slash = PathBuf::from(format!("{}/", d.join("link").display()));
    let pid = nginx.pid().to_string();
    let cases: [(&str, &Path, &str); 4] = [
        ("run", &file, "it exists and is not a folder"),
        ("probe", &file, "it exists and is not a folder"),
        ("run", &theirs, "it is a folder of user 54321, not yours"),
        (
            "run",
            &slash,
            "it is a symbolic link, which srvprof never follows",
        ),
    ];
    for (command, out_dir, says) in cases {
        let started = Instant::now();
        let mut cmd = Command::new(srvprof_bin());
        cmd.args([command, "--pid", &pid, "-d", "5s"])
            .arg("--out")
            .arg(out_dir);
        if command == "run" {
            cmd.args(["--url", &nginx.url(), "-c", "2"]);
        }
        let out = cmd.output().expect("srvprof");
        assert_refused(&out, says);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{command} --out {}: refused after {:?}, not before the run",
            out_dir.display(),
            started.elapsed()
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    assert_eq!(std::fs::read_dir(d.join("elsewhere")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);

    let fresh = d.join("fresh");
    let mut run = RunArgs::pid(nginx.pid())
        .args(&["--url", &nginx.url(), "--stacks", "off"])
        .load(2, "3s", "500ms")
        .out(&fresh)
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !fresh.exists() && Instant::now() < deadline && run.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert!(fresh.exists(), "the run's folder is made when it starts");
    let while_running = mode(&fresh);
    let status = run.wait().unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(while_running, 0o700, "private while the run measures");
    assert_eq!(mode(&fresh), 0o755, "the umask's (022) once complete");
    assert!(fresh.join("run.json").is_file());
    std::fs::remove_dir_all(&d).unwrap();
}

/// `report`, `compare` and `merge` read a folder someone else wrote: a folded-stacks file or a
/// run.json that is a link to a root-only file is refused in a sentence, and the file's lines
/// reach no report.
#[test]
fn report_compare_and_merge_do_not_read_through_a_planted_link() {
    let d = scratch("inputs");
    let secret = d.join("shadow");
    std::fs::write(&secret, "root-only;SECRET_FRAME 7\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let fixture = workspace_root().join("crates/analysis/tests/fixtures/run.json");
    let folder = d.join("copied");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(&fixture, folder.join("run.json")).unwrap();
    symlink(&secret, folder.join("oncpu-server.folded")).unwrap();
    let out = Command::new(srvprof_bin())
        .arg("report")
        .arg(&folder)
        .output()
        .unwrap();
    assert_refused(
        &out,
        "it is a symbolic link, which srvprof does not read through",
    );
    let html = std::fs::read_to_string(folder.join("report.html")).unwrap_or_default();
    assert!(!html.contains("SECRET_FRAME"));

    let other = d.join("other");
    std::fs::create_dir(&other).unwrap();
    symlink(&secret, other.join("run.json")).unwrap();
    let out = Command::new(srvprof_bin())
        .arg("compare")
        .arg(folder.join("run.json"))
        .arg(&other)
        .output()
        .unwrap();
    assert_refused(&out, "symbolic link");

    let agent = d.join("agent");
    std::fs::create_dir(&agent).unwrap();
    symlink(&secret, agent.join("load.json")).unwrap();
    let out = merge(&[&agent], &d.join("merged"));
    assert_refused(&out, "symbolic link");
    assert!(!stderr(&out).contains("SECRET_FRAME"));
    std::fs::remove_dir_all(&d).unwrap();
}

/// A V2 compressed histogram whose inner header claims a payload of `claimed` bytes.
fn histogram_claiming(encoded: &str, claimed: u32) -> String {
    let compressed = srvprof_loadgen::hdr_log_read::base64_decode(encoded).unwrap();
    let mut plain = Vec::new();
    flate2::read::ZlibDecoder::new(&compressed[8..])
        .read_to_end(&mut plain)
        .unwrap();
    plain[4..8].copy_from_slice(&claimed.to_be_bytes());
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&plain).unwrap();
    let deflated = z.finish().unwrap();
    let mut out = compressed[0..4].to_vec();
    out.extend_from_slice(&(deflated.len() as u32).to_be_bytes());
    out.extend_from_slice(&deflated);
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(&out)
}

/// Hand-edited latency logs that aborted or panicked `merge` (a 4 GiB payload, a StartTime at
/// the end of u64, an interval of 584 billion years) are each refused in one sentence.
#[test]
fn a_hostile_latency_log_is_refused_in_a_sentence_not_an_abort() {
    let nginx = Server::start("nginx-hello", &["--cpus", "1"]);
    let d = scratch("hlog");
    let agent = d.join("agent");
    assert_success(&load_into(&nginx.url(), &agent));
    let log = std::fs::read_to_string(agent.join("latency.hlog")).unwrap();
    let interval = log
        .lines()
        .find(|l| l.contains(",HISTF"))
        .expect("an interval line")
        .to_string();
    let start_line = log
        .lines()
        .find(|l| l.starts_with("#[StartTime: "))
        .unwrap();
    // [Tag=host,]start,length,max,histogram
    let mut fields: Vec<String> = interval.split(',').map(str::to_string).collect();
    let n = fields.len();
    let histogram = fields[n - 1].clone();
    fields[n - 3] = "18446744073709.551".into();
    let endless = fields.join(",");
    let edits = [
        (
            "a 4 GiB payload",
            log.replace(&histogram, &histogram_claiming(&histogram, 0xFFFF_FFF0)),
        ),
        (
            "StartTime at the end of u64",
            log.replace(
                start_line,
                "#[StartTime: 18446744073709551615.000 (seconds since epoch)]",
            ),
        ),
        (
            "an interval of 584 billion years",
            log.replace(&interval, &endless),
        ),
    ];
    for (what, text) in edits {
        assert_ne!(text, log, "{what}: the edit changed the log");
        std::fs::write(agent.join("latency.hlog"), text).unwrap();
        let out = merge(&[&agent], &d.join("merged"));
        assert_refused(&out, "is not a latency log srvprof can merge");
        eprintln!("{what}: {}", stderr(&out).trim_end());
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Under sudo (SUDO_UID and SUDO_GID given), what needs no privilege is not root's: `report`
/// reads a folder as the user who ran sudo (a root-only run.json in it is refused, one that user
/// may read is reported, the report theirs), and `run --cmd` starts the server as that user,
/// as root only with --cmd-as-root.
#[test]
fn under_sudo_what_needs_no_privilege_runs_as_the_user_who_ran_it() {
    require_root();
    use std::os::unix::fs::MetadataExt;
    const USER: u32 = 65_534;
    let sudo = |cmd: &mut Command| {
        cmd.env("SUDO_UID", USER.to_string())
            .env("SUDO_GID", USER.to_string());
    };
    let d = scratch("sudo");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    let folder = d.join("copied");
    std::fs::create_dir(&folder).unwrap();
    std::os::unix::fs::chown(&folder, Some(USER), Some(USER)).unwrap();
    let fixture = workspace_root().join("crates/analysis/tests/fixtures/run.json");
    std::fs::copy(&fixture, folder.join("run.json")).unwrap();
    std::fs::set_permissions(
        folder.join("run.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let mut report = Command::new(srvprof_bin());
    report.arg("report").arg(&folder);
    sudo(&mut report);
    assert_refused(&report.output().unwrap(), "Permission denied");
    std::os::unix::fs::chown(folder.join("run.json"), Some(USER), Some(USER)).unwrap();
    assert_success(&report.output().unwrap());
    assert_eq!(
        std::fs::metadata(folder.join("report.html")).unwrap().uid(),
        USER
    );

    for (as_root, expected) in [(false, USER), (true, 0)] {
        let port = free_port();
        let uid_file = d.join(format!("uid-{as_root}"));
        let cmd = format!(
            "sh -c 'id -u > {}; exec /usr/bin/python3 -m http.server --bind 127.0.0.1 {port}'",
            uid_file.display()
        );
        let mut run = RunArgs::cmd(&cmd)
            .args(&[
                "--url",
                &format!("http://127.0.0.1:{port}/"),
                "--stacks",
                "off",
            ])
            .load(2, "2s", "500ms")
            .out(&d.join(format!("run-{as_root}")))
            .command();
        if as_root {
            run.arg("--cmd-as-root");
        }
        sudo(&mut run);
        let out = run.output().unwrap();
        assert_success(&out);
        let uid: u32 = std::fs::read_to_string(&uid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(uid, expected, "--cmd-as-root {as_root}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}
