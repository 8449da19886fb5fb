//! Request lists (`--targets FILE`) against a server that counts what it got per path (Go's
//! net/http, tests/fixtures/h2c): a list of three requests with weights 3, 2 and 1 sent 600 times
//! in turn gives exactly 300, 200 and 100, bodies included, and srvprof's per-request counts
//! are the server's; taken at random with a seed, the same seed draws the same; a file that
//! cannot be read or parsed is one sentence naming the line.

use srvprof_integration::go_h2c::GoH2c;
use srvprof_integration::tls_nginx::load;
use srvprof_integration::*;

/// A targets file in a fresh directory: /a three times, /b twice, a POST to /c with a 7-byte body.
fn weighted_list(name: &str, port: u16) -> std::path::PathBuf {
    let dir = fresh_run_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("body.txt"), b"payload").unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let text = format!(
        "# weights 3, 2, 1\n\
         GET {base}/a\n\
         GET {base}/b\nX-Test: 1\n\n\
         GET {base}/a\n\
         POST {base}/c\nContent-Type: text/plain\n@body.txt\n\n\
         GET {base}/b\nX-Test: 1\n\
         GET {base}/a\n"
    );
    let path = dir.join("targets.txt");
    std::fs::write(&path, text).unwrap();
    path
}

/// srvprof's completed count per request of the report's `targets`.
fn ours(report: &serde_json::Value) -> std::collections::BTreeMap<String, u64> {
    (report["targets"]["top"].as_array().unwrap().iter())
        .map(|t| {
            let path = t["request"].as_str().unwrap().rsplit('/').next().unwrap();
            (format!("/{path}"), t["completed"].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn a_weighted_list_in_turn_gives_each_request_exactly_its_share_as_the_server_counts() {
    require_root();
    let server = GoH2c::start("0s");
    let list = weighted_list("targets-rr", server.port);
    let url = format!("http://127.0.0.1:{}/", server.port);
    let json = list.with_file_name("load.json");
    let targets = list.display().to_string();
    let (ok, stdout, stderr, report) = load(
        &url,
        &["--targets", &targets, "-c", "4", "-n", "600"],
        &json,
    );
    assert!(ok, "{stderr}");
    let stats = server.stats();
    eprintln!("server {stats}\n{stdout}");
    let paths = &stats["paths"];
    assert_eq!(
        (
            paths["/a"].as_u64(),
            paths["/b"].as_u64(),
            paths["/c"].as_u64()
        ),
        (Some(300), Some(200), Some(100))
    );
    assert_eq!(stats["body_bytes"].as_u64(), Some(700));
    let counted = ours(&report);
    assert_eq!(counted["/a"], 300);
    assert_eq!(counted["/b"], 200);
    assert_eq!(counted["/c"], 100);
    assert_eq!(report["targets"]["entries"].as_u64(), Some(6));
    assert_eq!(report["targets"]["distinct"].as_u64(), Some(3));
    let top = &report["targets"]["top"][0];
    assert_eq!(top["latency_us"]["count"].as_u64(), Some(300));
}

#[test]
fn at_random_the_same_seed_draws_the_same_requests() {
    require_root();
    let mut draws = Vec::new();
    for seed in ["7", "7", "8"] {
        let server = GoH2c::start("0s");
        let list = weighted_list(&format!("targets-random-{}", draws.len()), server.port);
        let url = format!("http://127.0.0.1:{}/", server.port);
        let json = list.with_file_name("load.json");
        let targets = list.display().to_string();
        let (ok, _, stderr, report) = load(
            &url,
            &[
                "--targets",
                &targets,
                "--targets-order",
                "random",
                "--seed",
                seed,
                "-c",
                "1",
                "-n",
                "1200",
            ],
            &json,
        );
        assert!(ok, "{stderr}");
        let counted = ours(&report);
        let paths = server.stats()["paths"].clone();
        eprintln!("seed {seed}: srvprof {counted:?}, server {paths}");
        for (path, n) in &counted {
            assert_eq!(paths[path.as_str()].as_u64(), Some(*n), "{path}");
        }
        // Weights 3:2:1 of 1200: 600, 400, 200, give or take.
        assert!((520..=680).contains(&counted["/a"]), "{counted:?}");
        assert!((130..=270).contains(&counted["/c"]), "{counted:?}");
        assert_eq!(report["targets"]["order"], "random");
        draws.push(counted);
    }
    assert_eq!(draws[0], draws[1], "seed 7 twice");
    assert_ne!(draws[0], draws[2], "seeds 7 and 8");
}

#[test]
fn a_targets_file_that_cannot_be_used_is_one_sentence_naming_the_line() {
    require_root();
    let server = GoH2c::start("0s");
    let url = format!("http://127.0.0.1:{}/", server.port);
    let dir = fresh_run_dir("targets-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("load.json");
    let bad = dir.join("bad.txt");
    for (text, says) in [
        (
            format!("GET {url}a\nnot a header line\n"),
            "bad.txt line 2: `not a header line` is neither",
        ),
        (
            "GET http://127.0.0.1:9/x\n".to_string(),
            "line 1: http://127.0.0.1:9/x is not on the run's server",
        ),
        (
            format!("GET {url}a\n@missing.bin\n"),
            "line 2: cannot read the body file",
        ),
    ] {
        std::fs::write(&bad, &text).unwrap();
        let (ok, _, stderr, _) = load(
            &url,
            &["--targets", &bad.display().to_string(), "-n", "5"],
            &json,
        );
        assert!(
            !ok && stderr.contains(says) && stderr.lines().count() <= 2,
            "{text:?}: {stderr}"
        );
    }
    let missing = dir.join("nonexistent.txt");
    let (ok, _, stderr, _) = load(
        &url,
        &["--targets", &missing.display().to_string(), "-n", "5"],
        &json,
    );
    assert!(!ok && stderr.contains("cannot read --targets"), "{stderr}");
    // Nothing reached the server.
    assert_eq!(server.stats()["paths"], serde_json::json!({}));
}
