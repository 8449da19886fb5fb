//! Who reset the connections: servers that reset, or make their client reset, by construction,
//! profiled with `srvprof run`. The references are the load generator's own error counts (what
//! its sockets returned, independent of the BPF programs) and the construction of the server.

use srvprof_integration::*;

fn tcp_of(run: &serde_json::Value, side: &str, key: &str) -> u64 {
    run[side]["tcp"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("{side}.tcp.{key}: {}", run[side]["tcp"]))
}

/// The side's resets in `direction` with their state and reason, most first.
fn resets_of(run: &serde_json::Value, side: &str, direction: &str) -> Vec<(String, String, u64)> {
    run[side]["tcp"]["resets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["direction"] == direction)
        .map(|r| {
            (
                r["state"].as_str().unwrap().to_string(),
                r["reason"].as_str().unwrap_or("-").to_string(),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Only one side sends: the two groups' figures are the two ends of the same resets, not one
/// host-wide number twice.
/// The side's most frequent sent reset is (state, reason); returns it with its count.
fn assert_top_sent(
    run: &serde_json::Value,
    side: &str,
    expected: (&str, &str),
) -> (String, String, u64) {
    let top = resets_of(run, side, "sent")
        .into_iter()
        .next()
        .unwrap_or_default();
    assert_eq!(
        (top.0.as_str(), top.1.as_str()),
        expected,
        "{side}: {top:?}"
    );
    top
}

fn assert_sides_differ(run: &serde_json::Value, sender: &str, receiver: &str) {
    let sent = tcp_of(run, sender, "resets_sent");
    assert_ne!(
        run["server"]["tcp"], run["client"]["tcp"],
        "server and client TCP figures are the same"
    );
    assert!(
        tcp_of(run, receiver, "resets_sent") <= 1,
        "{receiver} sent {} resets",
        tcp_of(run, receiver, "resets_sent")
    );
    assert!(tcp_of(run, sender, "resets_received") <= 1);
    // Counted by another tracepoint on the other end's sockets.
    let received = tcp_of(run, receiver, "resets_received");
    assert!(
        sent.abs_diff(received) <= 2,
        "{sender} sent {sent}, {receiver} received {received}"
    );
    // The host's own counter (Tcp:OutRsts, same window) holds them, plus whatever else on this
    // shared machine sent resets, but for a reset at either edge (it is read apart from the
    // programs' counts: 299 against 300 seen).
    let host = run["host_tcp"]["resets_sent"].as_u64().unwrap();
    assert!(
        host + 2 >= sent,
        "the host sent {host} resets, {sender} {sent}"
    );
}

#[test]
fn a_server_resetting_every_third_connection_is_named_with_its_resets() {
    require_root();
    let port = free_port();
    let run = RunArgs::cmd(&faulty_cmd(port, &["--mode", "reset-every-third"]))
        .args(&["--no-keepalive", "--rate", "300"])
        .load(4, "3s", "1s")
        .args(&["--stacks", "off"])
        .run_ok("reset-every-third");
    let completed = run["load"]["completed"].as_u64().unwrap();
    let client_resets = errors_of(&run, "reset");
    // By construction one request in three (one connection each) is reset.
    let requests = completed + client_resets;
    assert!(
        client_resets.abs_diff(requests / 3) <= 2 && client_resets > 100,
        "{client_resets} resets of {requests} requests"
    );
    assert_eq!(run["load"]["errors"], client_resets);

    let server_sent = tcp_of(&run, "server", "resets_sent");
    eprintln!(
        "server sent {server_sent} ({:?}), client saw {client_resets} reset errors; client sent {}, received {} ({:?}); host {}",
        resets_of(&run, "server", "sent"),
        tcp_of(&run, "client", "resets_sent"),
        tcp_of(&run, "client", "resets_received"),
        resets_of(&run, "client", "received"),
        run["host_tcp"]
    );
    // A request in flight at either edge of the measured window can be counted by one and not
    // the other: the load generator and the sampler start and end their windows apart.
    assert!(
        server_sent.abs_diff(client_resets) <= 2,
        "server sent {server_sent} resets, the load generator saw {client_resets}"
    );
    assert_sides_differ(&run, "server", "client");
    // What this kernel (6.18) says of a close with SO_LINGER 0: tcp_disconnect's reset, reason
    // TCP_STATE, sent after the socket moved to CLOSE (and counted in TcpExt:TCPAbortOnData).
    let top = assert_top_sent(&run, "server", ("CLOSE", "TCP_STATE"));
    assert!(top.2 + 2 >= server_sent);

    let first = &run["findings"][0];
    assert_eq!(first["kind"], "server_resets", "{}", run["findings"]);
    let summary = first["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("the server sent {server_sent} TCP resets"))
            && summary.contains("SO_LINGER 0"),
        "{summary}"
    );
    assert!(first["evidence"]["error_share"].as_f64().unwrap() >= 0.99);
    assert!(finding(&run, "client_resets").is_none());
}

#[test]
fn a_client_timeout_shorter_than_the_reply_gives_client_sent_resets() {
    require_root();
    let port = free_port();
    let connections = 4;
    let (_, stderr, run) =
        RunArgs::cmd(&faulty_cmd(port, &["--mode", "delay", "--delay-ms", "500"]))
            .load(connections, "3s", "1s")
            .args(&["--timeout", "100ms", "--stacks", "off"])
            .run("client-timeout");
    assert!(
        run.is_object(),
        "run.json was written (no request succeeds): {stderr}"
    );
    let timeouts = errors_of(&run, "read_timeout");
    assert_eq!(run["load"]["completed"], 0);
    let client_sent = tcp_of(&run, "client", "resets_sent");
    eprintln!(
        "client sent {client_sent} ({:?}) after {timeouts} read timeouts; server received {} ({:?}); host {}",
        resets_of(&run, "client", "sent"),
        tcp_of(&run, "server", "resets_received"),
        resets_of(&run, "server", "received"),
        run["host_tcp"]
    );
    // Each request the client gave up on is answered 400 ms later, and that answer draws one
    // reset: as many as the timeouts, but for the answers still on their way at each edge of
    // the window (up to 500 / 100 per connection: those of the warmup's timeouts come in, the
    // last ones' fall after it).
    assert!(
        timeouts > 50 && client_sent.abs_diff(timeouts) <= 5 * connections,
        "{client_sent} client resets for {timeouts} timeouts"
    );
    // The kernel's own count (host-wide OutRsts, the only resets on this machine in a CI run)
    // is at least the probes'.
    assert!(
        run["host_tcp"]["resets_sent"].as_u64().unwrap() >= client_sent,
        "{}",
        run["host_tcp"]
    );
    assert_sides_differ(&run, "client", "server");
    // What this kernel says: the client's closed connection (an orphaned FIN_WAIT2, kept as a
    // timewait socket) answered the server's late reply with a reset.
    assert_top_sent(&run, "client", ("TIME_WAIT", "TCP_TIMEWAIT_SOCKET"));
    let f = expect_finding(&run, "client_resets");
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("the client sent {client_sent} TCP resets"))
            && summary.contains("the peer wrote after this side closed")
            && summary.contains("timeouts after 100 ms"),
        "{summary}"
    );
    assert!(finding(&run, "server_resets").is_none());
}
