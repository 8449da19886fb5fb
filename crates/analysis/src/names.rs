//! Names of kernel numbers, from tables (no lookup on the running kernel).

/// The syscall's name on x86_64, or `syscall_N`.
pub fn syscall_name(nr: u32) -> String {
    syscalls::Sysno::new(nr as usize)
        .map(|s| s.name().to_string())
        .unwrap_or_else(|| format!("syscall_{nr}"))
}

/// The signal's name (SIGSEGV, ...), or "signal" for one without a common name.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_their_x86_64_names() {
        assert_eq!(syscall_name(0), "read");
        assert_eq!(syscall_name(20), "writev");
        assert_eq!(syscall_name(232), "epoll_wait");
        assert_eq!(syscall_name(100_000), "syscall_100000");
        assert_eq!(signal_name(11), "SIGSEGV");
        assert_eq!(signal_name(64), "signal");
    }
}
