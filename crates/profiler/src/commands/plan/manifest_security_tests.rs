//! The manifests' privileges, read from the parsed YAML: the probes get what eBPF needs and no
//! more, the load agents get nothing.

use serde_norway::Value as Yaml;

use super::tests::plan_of;
use super::*;

/// Both manifests rendered, with a node folder and with a claim.
fn rendered() -> Vec<(Yaml, Yaml)> {
    let mut out = Vec::new();
    for volume in [&[][..], &["--claim", "results"]] {
        let mut argv = vec![
            "http://server:8080/",
            "-d",
            "30s",
            "--hosts",
            "3",
            "--start-at",
            "+5m",
            "--server-pids-from",
            "pgrep nginx",
            "--image",
            "registry.example/srvprof:1",
        ];
        argv.extend(volume);
        let (plan, args) = plan_of(&argv).unwrap();
        let (job, daemonset) = kubernetes(&plan, &args).unwrap();
        let parse = |text: &str| -> Yaml {
            serde_norway::from_str(text).unwrap_or_else(|e| panic!("{e}:\n{text}"))
        };
        out.push((parse(&job), parse(&daemonset)));
    }
    out
}

fn strings(list: &Yaml) -> Vec<&str> {
    list.as_sequence()
        .unwrap_or_else(|| panic!("not a list: {list:?}"))
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// Every container of a pod spec, init containers first.
fn containers(pod: &Yaml) -> Vec<&Yaml> {
    let mut all = Vec::new();
    for key in ["initContainers", "containers"] {
        if let Some(list) = pod[key].as_sequence() {
            all.extend(list);
        }
    }
    all
}

/// What every container of both manifests has: no privilege gained past its start, the runtime's
/// seccomp filter, and bounded memory and CPU time.
fn assert_confined(pod: &Yaml, what: &str) {
    assert_eq!(
        pod["automountServiceAccountToken"], false,
        "{what}: {pod:?}"
    );
    assert!(
        pod["hostNetwork"].is_null() && pod["hostIPC"].is_null(),
        "{what}"
    );
    for c in containers(pod) {
        let name = c["name"].as_str().unwrap();
        let sc = &c["securityContext"];
        assert_eq!(
            sc["allowPrivilegeEscalation"], false,
            "{what} {name}: {sc:?}"
        );
        assert_ne!(sc["privileged"], true, "{what} {name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{what} {name}");
        assert_eq!(
            strings(&sc["capabilities"]["drop"]),
            ["ALL"],
            "{what} {name}"
        );
        let seccomp = if sc["seccompProfile"].is_null() {
            &pod["securityContext"]["seccompProfile"]
        } else {
            &sc["seccompProfile"]
        };
        assert_eq!(
            seccomp["type"], "RuntimeDefault",
            "{what} {name}: {seccomp:?}"
        );
        let limits = &c["resources"]["limits"];
        assert!(limits["memory"].is_string(), "{what} {name}: {limits:?}");
        assert!(
            c["resources"]["requests"]["cpu"].is_string(),
            "{what} {name}"
        );
    }
}

#[test]
fn the_probes_have_their_three_capabilities_the_runtimes_seccomp_filter_and_limits() {
    for (_, daemonset) in rendered() {
        let pod = &daemonset["spec"]["template"]["spec"];
        assert_confined(pod, "DaemonSet");
        assert_eq!(pod["hostPID"], true);
        let probe = &pod["containers"][0];
        let sc = &probe["securityContext"];
        assert_eq!(
            strings(&sc["capabilities"]["add"]),
            ["BPF", "PERFMON", "SYS_PTRACE"]
        );
        assert_eq!(sc["runAsUser"], 0, "{sc:?}");
        // The probe shares the server's node: its CPU time is bounded too.
        assert!(probe["resources"]["limits"]["cpu"].is_string(), "{probe:?}");
        // The runtime's AppArmor profile lets a container read /proc/PID files only of
        // processes under the same profile, and a server run on the node is not: the one
        // unconfined part, said in the manifest.
        assert_eq!(sc["appArmorProfile"]["type"], "Unconfined", "{sc:?}");
        let said = DAEMONSET_TEMPLATE
            .lines()
            .take_while(|l| !l.contains("appArmorProfile:"))
            .filter(|l| l.trim_start().starts_with('#'))
            .any(|l| l.contains("AppArmor") && l.contains("/proc"));
        assert!(said, "the DaemonSet says why AppArmor is Unconfined");
    }
}

#[test]
fn the_load_agents_run_as_a_user_with_no_capability_and_no_token() {
    for (job, _) in rendered() {
        let pod = &job["spec"]["template"]["spec"];
        assert_confined(pod, "Job");
        assert!(pod["hostPID"].is_null(), "{pod:?}");
        let load = pod["containers"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "load")
            .unwrap();
        let sc = &load["securityContext"];
        let user = |key: &str| {
            let v = &sc[key];
            if v.is_null() {
                pod["securityContext"][key].clone()
            } else {
                v.clone()
            }
        };
        assert_eq!(user("runAsNonRoot"), true, "{sc:?}");
        assert!(user("runAsUser").as_u64().is_some_and(|u| u > 0), "{sc:?}");
        assert!(sc["capabilities"]["add"].is_null(), "{sc:?}");
        // The node folder is made by the kubelet as root's: an init container gives the agent
        // its own folder in it, with CHOWN alone.
        for init in pod["initContainers"].as_sequence().into_iter().flatten() {
            let add = strings(&init["securityContext"]["capabilities"]["add"]);
            assert_eq!(add, ["CHOWN"], "{init:?}");
        }
    }
}
