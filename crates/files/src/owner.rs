//! Who srvprof works for: under sudo, the user who ran sudo (SUDO_UID/SUDO_GID), not root.

/// The invoking user's uid and gid under sudo, if srvprof runs under sudo.
pub fn invoking_user() -> Option<(u32, u32)> {
    let id = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    Some((id("SUDO_UID")?, id("SUDO_GID")?))
}

/// Whether a file owned by `uid` is one srvprof may trust to lead somewhere or to write into:
/// srvprof's own (root's, or its effective user's) or the invoking user's.
pub(crate) fn trusted(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    uid == 0 || uid == euid || invoking_user().is_some_and(|(u, _)| u == uid)
}

/// The uid a folder srvprof reuses must belong to: the invoking user's, or srvprof's own.
pub(crate) fn may_reuse(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    uid == euid || invoking_user().is_some_and(|(u, _)| u == uid)
}
