//! `srvprof run --pyroscope URL` (and `probe`'s): the server's pprof profile (DIR/profile-server.pb.gz, on- and
//! off-CPU time) pushed to Pyroscope's ingest API once the run folder is written (http or https,
//! with the credentials of --pyroscope-auth-file or SRVPROF_PYROSCOPE_AUTH), as the app
//! `srvprof` labelled with the run's id and the load's host, over the measured window, so that
//! the agents and runs of a split run sit beside their servers' profiles in Grafana.

use std::path::Path;
use std::time::{Duration, SystemTime};

use srvprof_loadgen::LoadReport;
use srvprof_loadgen::http_push::{self, Endpoint, Receiver};
use srvprof_loadgen::push_auth::{self, PushAuth};

use crate::error::SrvprofError;

/// The application name Pyroscope files the profiles under.
pub const APP: &str = "srvprof";

/// A push without an answer by then has failed.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The receiver of `--pyroscope`, set up before anything runs: its TLS client (trusting
/// `cacert` too) and its credentials (`auth_file`, else SRVPROF_PYROSCOPE_AUTH).
pub fn receiver(
    endpoint: Option<&Endpoint>,
    cacert: Option<&Path>,
    auth_file: Option<&Path>,
) -> Result<Option<Receiver>, SrvprofError> {
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    let auth = PushAuth::read(auth_file, &push_auth::PYROSCOPE).map_err(SrvprofError::Loadgen)?;
    Receiver::new(endpoint.clone(), cacert, auth)
        .map(Some)
        .map_err(SrvprofError::Loadgen)
}

/// `POST URL/ingest?...` of the profile in `dir`; Err is one sentence saying what went wrong and
/// what to check.
pub fn push(receiver: &Receiver, dir: &Path, load: &LoadReport) -> Result<(), String> {
    let run = load.config.run_id.as_deref().unwrap_or_default();
    push_window(receiver, dir, run, window_unix_s(load))
}

/// The same for a window given in Unix seconds (`srvprof probe`'s, which has no load).
pub fn push_window(
    receiver: &Receiver,
    dir: &Path,
    run: &str,
    (from, until): (u64, u64),
) -> Result<(), String> {
    let file = dir.join("profile-server.pb.gz");
    let body = std::fs::read(&file).map_err(|e| {
        format!(
            "no server profile to push to Pyroscope ({}: {e}): the run recorded no server stacks",
            file.display()
        )
    })?;
    let host = srvprof_loadgen::start::host_name();
    let endpoint = receiver.endpoint();
    let path = ingest_path(endpoint.path_and_query(), run, &host, from, until);
    let headers = [("Content-Type", "application/octet-stream")];
    receiver.post_blocking(&path, &headers, body, PUSH_TIMEOUT).map_err(|why| {
        format!(
            "pushing the server's profile to Pyroscope at {} failed: {why}; check that the URL is Pyroscope's (its /ingest is under it); the profile is still in {}",
            endpoint.url,
            file.display()
        )
    })
}

/// The measured window on the wall clock, in Unix seconds (the end rounded up).
fn window_unix_s(load: &LoadReport) -> (u64, u64) {
    window_from(load.start_monotonic_ns, load.duration_s)
}

/// The window from `start_ns` (CLOCK_MONOTONIC) for `duration_s`, in Unix seconds (the end
/// rounded up).
pub fn window_from(start_ns: u64, duration_s: f64) -> (u64, u64) {
    let since_start = srvprof_loadgen::monotonic_ns().saturating_sub(start_ns);
    let start = SystemTime::now() - Duration::from_nanos(since_start);
    let from = start
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let end = start + Duration::from_secs_f64(duration_s.max(0.0));
    let until = end
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs_f64().ceil() as u64);
    (from, until.max(from + 1))
}

/// The ingest request's path and query, under the URL's own path (`http://host:4040/` or a
/// proxy's `http://host/pyroscope`).
pub fn ingest_path(base: &str, run: &str, host: &str, from: u64, until: u64) -> String {
    let base = base
        .split('?')
        .next()
        .unwrap_or_default()
        .trim_end_matches('/');
    let name = format!("{APP}{{run={run},host={host}}}");
    format!(
        "{base}/ingest?name={}&from={from}&until={until}&format=pprof&spyName=srvprof",
        http_push::percent_encode(&name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ingest_query_names_the_app_with_its_labels_and_the_window() {
        let path = ingest_path("/", "start-2026-11-29T10:00:00.000Z", "client-2", 100, 160);
        assert_eq!(
            path,
            "/ingest?name=srvprof%7Brun%3Dstart-2026-11-29T10%3A00%3A00.000Z%2Chost%3Dclient-2%7D&from=100&until=160&format=pprof&spyName=srvprof"
        );
        assert!(ingest_path("/pyroscope/", "r", "h", 1, 2).starts_with("/pyroscope/ingest?"));
    }
}
