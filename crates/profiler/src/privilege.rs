//! Least privilege under sudo: what needs no privilege runs as the user who ran sudo. The
//! commands that only read folders and write reports (report, merge, compare, plan, load) drop
//! root before they read anything; `run --cmd` starts the server as that user.

use std::ffi::CStr;

/// The invoking user's name and home, for a server started as them.
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    pub name: Option<String>,
    pub home: Option<String>,
}

/// The user who ran sudo, when srvprof runs as root under sudo for someone else.
pub fn invoking_account() -> Option<Account> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let (uid, gid) = srvprof_files::invoking_user().filter(|&(uid, _)| uid != 0)?;
    let (name, home) = passwd_entry(uid);
    Some(Account {
        uid,
        gid,
        name,
        home,
    })
}

/// The user's name and home directory from the password database.
fn passwd_entry(uid: u32) -> (Option<String>, Option<String>) {
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: zeroed is a valid passwd; getpwuid_r fills it with pointers into `buf`, which
    // outlives their use below.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let r = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if r != 0 || found.is_null() {
        return (None, None);
    }
    // SAFETY: on success both fields point at NUL-terminated strings in `buf`.
    let text = |p: *const libc::c_char| {
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    (text(pwd.pw_name), text(pwd.pw_dir))
}

/// Under sudo, becomes the invoking user for good (groups, gid, then uid), before any thread
/// starts; says nothing and does nothing otherwise. An error is one sentence.
pub fn drop_to_invoking_user() -> Result<(), String> {
    let Some(account) = invoking_account() else {
        return Ok(());
    };
    let groups = [account.gid];
    // SAFETY: setgroups reads the array we own; setgid and setuid take plain ids.
    let dropped = unsafe {
        libc::setgroups(1, groups.as_ptr()) == 0
            && libc::setgid(account.gid) == 0
            && libc::setuid(account.uid) == 0
    };
    if !dropped {
        return Err(format!(
            "could not become user {} (the one who ran sudo): {}; run this command without sudo",
            account.uid,
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
