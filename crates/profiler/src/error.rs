//! Errors a user can meet, each one sentence saying what went wrong and what to do.
//!
//! A variant caused by another error keeps that error as its [`source`](std::error::Error::source);
//! the sentence still quotes it, so `srvprof: {error}` alone says everything.

use thiserror::Error;

/// The error underneath a [`SrvprofError`], or the reason srvprof itself found (a symbolic link
/// where a file goes, a field missing from the kernel's BTF) when there is none.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Error)]
pub enum SrvprofError {
    #[error(
        "srvprof needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE) to load eBPF probes; run it with sudo"
    )]
    NotRoot,
    #[error(
        "this kernel has no BTF at /sys/kernel/btf/vmlinux; srvprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (Linux 5.5 or newer)"
    )]
    NoKernelBtf,
    /// The source is btf_rs's error, or our own reason (no such member, not in the enum).
    #[error(
        "could not find {field} in the kernel's BTF ({source}); this kernel's layout is not supported, please report it"
    )]
    BtfField {
        field: String,
        #[source]
        source: Cause,
    },
    #[error("no process with PID {0} exists; check the PID with `pgrep` or `ps`")]
    NoSuchPid(u32),
    #[error(
        "PID {0} is a kernel thread, which has no server to profile; pass the PID of a user-space process"
    )]
    KernelThread(u32),
    #[error(
        "none of the given PIDs ({0}) exists any more; start the server and pass its current PIDs"
    )]
    NoLivePids(String),
    #[error(
        "no PID was given; pass the server's PIDs with --pid, for example --pid $(pgrep nginx)"
    )]
    NoPids,
    /// The source is aya's ProgramError, why the online CPUs could not be read, or our own reason
    /// (not in the BPF object). The sentence quotes its whole chain, so the verifier's or kernel's
    /// reason shows.
    #[error(
        "the eBPF program {program} could not be loaded ({}); run `srvprof check` to see which prerequisite is missing",
        chain(.source.as_ref())
    )]
    ProgramLoad {
        program: String,
        #[source]
        source: Cause,
    },
    /// The source is aya's ProgramError; the sentence quotes its whole chain, so the kernel's
    /// reason shows.
    #[error(
        "the eBPF program {program} could not attach to the tracepoint {tracepoint} ({}); run `srvprof check`",
        chain(.source.as_ref())
    )]
    ProgramAttach {
        program: String,
        tracepoint: String,
        #[source]
        source: Cause,
    },
    /// The source is aya's MapError, or our own reason (not in the BPF object).
    #[error(
        "the eBPF map {map} is missing or has the wrong type ({source}); rebuild srvprof with `cargo xtask setup && cargo build`"
    )]
    Map {
        map: String,
        #[source]
        source: Cause,
    },
    /// The source is the loader's aya::EbpfError.
    #[error(
        "the eBPF object could not be loaded ({0}); run `srvprof check` to see which prerequisite is missing"
    )]
    Load(#[source] Cause),
    /// The source is the io::Error, or our own reason (a symbolic link, not a folder).
    #[error("could not write {path}: {source}; choose another --out path or fix its permissions")]
    Write {
        path: String,
        #[source]
        source: Cause,
    },
    #[error(
        "{path} exists and was not written by srvprof; pass --force to overwrite it or choose another --out"
    )]
    WouldOverwrite { path: String },
    #[error("{0}")]
    Usage(String),
    /// The load generator's own sentence and source (`srvprof run`'s load options and load run).
    #[error(transparent)]
    Loadgen(srvprof_loadgen::LoadError),
}

/// An error and its sources, joined by ": ".
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl SrvprofError {
    /// Process exit status for this error (2: bad input, 3: missing privilege or kernel support).
    pub fn exit_code(&self) -> u8 {
        match self {
            SrvprofError::NotRoot
            | SrvprofError::NoKernelBtf
            | SrvprofError::BtfField { .. }
            | SrvprofError::ProgramLoad { .. }
            | SrvprofError::ProgramAttach { .. }
            | SrvprofError::Map { .. }
            | SrvprofError::Load(_) => 3,
            _ => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each sentence is the one users saw before the cause was kept as the source.

    use std::error::Error;
    use std::io;
    use std::path::Path;

    use super::SrvprofError;

    #[test]
    fn write_keeps_the_io_error() {
        // /proc/sys refuses new entries, even to root.
        let e = crate::output::open_dir(Path::new("/proc/sys/srvprof-run")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "could not write /proc/sys/srvprof-run: srvprof-run cannot be made in its folder (No such file or directory (os error 2)); choose another --out path or fix its permissions"
        );
        let source = e.source().unwrap().downcast_ref::<io::Error>().unwrap();
        assert_eq!(source.kind(), io::ErrorKind::NotFound);
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn write_states_its_own_reason_when_there_is_no_error() {
        let dir = std::env::temp_dir().join(format!("srvprof-error-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("out");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = crate::output::open_dir(&link).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "could not write {}: it is a symbolic link, which srvprof never follows; choose another --out path or fix its permissions",
                link.display()
            )
        );
        assert_eq!(
            e.source().unwrap().to_string(),
            "it is a symbolic link, which srvprof never follows"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn btf_field_keeps_the_btf_error() {
        let Err(cause) = btf_rs::Btf::from_file("/nonexistent-srvprof/vmlinux") else {
            panic!("a missing file parsed as BTF");
        };
        let e = SrvprofError::BtfField {
            field: "vmlinux".into(),
            source: cause.into(),
        };
        assert_eq!(
            e.to_string(),
            "could not find vmlinux in the kernel's BTF (i/o error: No such file or directory (os error 2)); this kernel's layout is not supported, please report it"
        );
        assert!(e.source().unwrap().is::<btf_rs::Error>());
        assert_eq!(e.exit_code(), 3);

        let e = SrvprofError::BtfField {
            field: "TCP_SYN_SENT".into(),
            source: "not in the enum of TCP states".into(),
        };
        assert_eq!(
            e.to_string(),
            "could not find TCP_SYN_SENT in the kernel's BTF (not in the enum of TCP states); this kernel's layout is not supported, please report it"
        );
        assert_eq!(
            e.source().unwrap().to_string(),
            "not in the enum of TCP states"
        );
    }

    #[test]
    fn map_keeps_aya_map_error() {
        let cause = aya::maps::MapError::SyscallError(aya::sys::SyscallError {
            call: "bpf_map_update_elem",
            io_error: io::Error::from_raw_os_error(libc::E2BIG),
        });
        let e = crate::probes::map_error("TCP_PORTS", cause);
        assert_eq!(
            e.to_string(),
            "the eBPF map TCP_PORTS is missing or has the wrong type (`bpf_map_update_elem` failed); rebuild srvprof with `cargo xtask setup && cargo build`"
        );
        let source = e.source().unwrap();
        assert!(source.is::<aya::maps::MapError>());
        // The kernel's answer, which the sentence never quoted, is now one source further.
        let os = source
            .source()
            .unwrap()
            .downcast_ref::<io::Error>()
            .unwrap();
        assert_eq!(os.raw_os_error(), Some(libc::E2BIG));
        assert_eq!(e.exit_code(), 3);

        let e = crate::probes::map_error("EXITS", "not in the BPF object");
        assert_eq!(
            e.to_string(),
            "the eBPF map EXITS is missing or has the wrong type (not in the BPF object); rebuild srvprof with `cargo xtask setup && cargo build`"
        );
        assert_eq!(e.source().unwrap().to_string(), "not in the BPF object");
    }

    /// aya's error for a failed syscall: the call in its message, the kernel's answer its source.
    fn syscall_failed(call: &'static str, errno: i32) -> aya::programs::ProgramError {
        aya::programs::ProgramError::SyscallError(aya::sys::SyscallError {
            call,
            io_error: io::Error::from_raw_os_error(errno),
        })
    }

    #[test]
    fn program_load_keeps_aya_program_error_and_quotes_its_chain() {
        let e = SrvprofError::ProgramLoad {
            program: "sys_enter".into(),
            source: syscall_failed("bpf_prog_load", libc::EINVAL).into(),
        };
        assert_eq!(
            e.to_string(),
            "the eBPF program sys_enter could not be loaded (`bpf_prog_load` failed: Invalid argument (os error 22)); run `srvprof check` to see which prerequisite is missing"
        );
        assert!(e.source().unwrap().is::<aya::programs::ProgramError>());
        assert_eq!(e.exit_code(), 3);
    }

    #[test]
    fn program_attach_keeps_aya_program_error_and_quotes_its_chain() {
        let e = SrvprofError::ProgramAttach {
            program: "oncpu_sample".into(),
            tracepoint: "perf_event cpu-clock on CPU 0".into(),
            source: syscall_failed("perf_event_open", libc::ENODEV).into(),
        };
        assert_eq!(
            e.to_string(),
            "the eBPF program oncpu_sample could not attach to the tracepoint perf_event cpu-clock on CPU 0 (`perf_event_open` failed: No such device (os error 19)); run `srvprof check`"
        );
        assert!(e.source().unwrap().is::<aya::programs::ProgramError>());
        assert_eq!(e.exit_code(), 3);
    }

    #[test]
    fn load_keeps_aya_ebpf_error_and_eperm_still_means_not_root() {
        let e = crate::probes::classify_load_error(aya::EbpfError::ProgramError(syscall_failed(
            "bpf_prog_load",
            libc::EINVAL,
        )));
        // The loader's own message only, as before: not its chain.
        assert_eq!(
            e.to_string(),
            "the eBPF object could not be loaded (program error: `bpf_prog_load` failed); run `srvprof check` to see which prerequisite is missing"
        );
        assert!(e.source().unwrap().is::<aya::EbpfError>());
        assert_eq!(e.exit_code(), 3);

        let eperm = aya::EbpfError::MapError(aya::maps::MapError::IoError(
            io::Error::from_raw_os_error(libc::EPERM),
        ));
        assert!(matches!(
            crate::probes::classify_load_error(eperm),
            SrvprofError::NotRoot
        ));
    }

    #[test]
    fn loadgen_error_keeps_its_sentence_and_source_and_exit_code() {
        let args = srvprof_loadgen::cli::LoadArgs {
            body_file: Some("/nonexistent-srvprof/body".into()),
            ..Default::default()
        };
        let e = SrvprofError::Loadgen(args.to_config().unwrap_err());
        assert_eq!(
            e.to_string(),
            "cannot read body file /nonexistent-srvprof/body: No such file or directory (os error 2); check the path given to --body-file"
        );
        let source = e.source().unwrap().downcast_ref::<io::Error>().unwrap();
        assert_eq!(source.kind(), io::ErrorKind::NotFound);
        // As the Usage it was before.
        assert_eq!(e.exit_code(), 2);
    }
}
