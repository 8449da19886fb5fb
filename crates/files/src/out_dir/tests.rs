use super::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("srvprof-outdir-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_link_planted_in_the_folder_is_replaced_not_written_through() {
    let d = scratch("planted");
    let victim = d.join("victim");
    fs::write(&victim, "precious").unwrap();
    let out = OutDir::open(&d.join("run")).unwrap();
    symlink(&victim, d.join("run/latency.hlog")).unwrap();
    out.write("latency.hlog", b"log").unwrap();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    let written = fs::symlink_metadata(d.join("run/latency.hlog")).unwrap();
    assert!(written.is_file());
    assert_eq!(
        fs::read_to_string(d.join("run/latency.hlog")).unwrap(),
        "log"
    );
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_folder_named_with_a_trailing_slash_is_not_followed_when_it_is_a_link() {
    let d = scratch("slash");
    fs::create_dir(d.join("elsewhere")).unwrap();
    symlink(d.join("elsewhere"), d.join("evil")).unwrap();
    for given in [
        d.join("evil"),
        PathBuf::from(format!("{}/evil/", d.display())),
    ] {
        let e = OutDir::open(&given).unwrap_err();
        assert!(
            e.to_string().contains("symbolic link"),
            "{}: {e}",
            given.display()
        );
    }
    assert_eq!(fs::read_dir(d.join("elsewhere")).unwrap().count(), 0);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_folder_is_made_private_and_opened_up_only_when_the_run_is_complete() {
    let d = scratch("mode");
    let out = OutDir::create_new(&d.join("a/b/run")).unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&d.join("a/b/run")), 0o700);
    out.write("run.json", b"{}").unwrap();
    out.finish().unwrap();
    assert_eq!(mode(&d.join("a/b/run")), 0o777 & !umask());
    // A name srvprof picked is never one that exists.
    let e = OutDir::create_new(&d.join("a/b/run")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    // A folder the user chose is reused, its mode left as it was.
    fs::set_permissions(d.join("a/b/run"), fs::Permissions::from_mode(0o750)).unwrap();
    OutDir::open(&d.join("a/b/run")).unwrap().finish().unwrap();
    assert_eq!(mode(&d.join("a/b/run")), 0o750);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_file_not_a_folder_is_refused_at_the_start() {
    let d = scratch("file");
    fs::write(d.join("results"), "x").unwrap();
    let e = OutDir::open(&d.join("results")).unwrap_err();
    assert_eq!(e.to_string(), "it exists and is not a folder");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_file_dropped_before_commit_leaves_nothing_and_a_committed_one_replaces_the_old() {
    let d = scratch("pending");
    let out = OutDir::open(&d).unwrap();
    out.write("load.json", b"old").unwrap();
    let mut f = out.create("load.json").unwrap();
    f.write_all(b"half").unwrap();
    drop(f);
    assert_eq!(fs::read_to_string(d.join("load.json")).unwrap(), "old");
    let mut f = out.create("load.json").unwrap();
    f.write_all(b"new").unwrap();
    f.commit().unwrap();
    assert_eq!(fs::read_to_string(d.join("load.json")).unwrap(), "new");
    let mut names = out.names();
    names.sort();
    assert_eq!(names, ["load.json"]);
    assert!(out.create("../escape").is_err() && out.create("..").is_err());
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn only_regular_files_are_removed_or_read() {
    let d = scratch("remove");
    let out = OutDir::open(&d).unwrap();
    fs::write(d.join("secret"), "s").unwrap();
    symlink(d.join("secret"), d.join("oncpu.folded")).unwrap();
    assert!(out.remove_file("oncpu.folded").is_err());
    assert_eq!(out.head("oncpu.folded", 10), None);
    assert_eq!(out.kind("oncpu.folded"), Some(Kind::Link));
    assert_eq!(out.head("secret", 10).unwrap(), b"s");
    out.remove_file("secret").unwrap();
    assert!(fs::symlink_metadata(d.join("oncpu.folded")).is_ok());
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_folder_or_a_link_of_another_user_is_refused() {
    assert!(!owner::may_reuse(54_321) && !owner::trusted(54_321));
    if !is_root() {
        return;
    }
    let d = scratch("foreign");
    fs::create_dir(d.join("theirs")).unwrap();
    std::os::unix::fs::chown(d.join("theirs"), Some(54_321), Some(54_321)).unwrap();
    let e = OutDir::open(&d.join("theirs")).unwrap_err();
    assert_eq!(e.to_string(), "it is a folder of user 54321, not yours");
    // Their folder is still a parent a single named file may go into.
    assert!(OutDir::parent_of(&d.join("theirs/latency.hlog")).is_ok());
    // A link on the way that another user planted is not followed.
    fs::create_dir(d.join("target")).unwrap();
    symlink(d.join("target"), d.join("via")).unwrap();
    std::os::unix::fs::lchown(d.join("via"), Some(54_321), Some(54_321)).unwrap();
    let e = OutDir::open(&d.join("via/run")).unwrap_err();
    assert!(e.to_string().contains("symbolic link of user 54321"), "{e}");
    assert!(!d.join("target/run").exists());
    // Root's own link on the way is followed, as the kernel's protected_symlinks would.
    std::os::unix::fs::lchown(d.join("via"), Some(0), Some(0)).unwrap();
    OutDir::open(&d.join("via/run")).unwrap();
    assert_eq!(fs::metadata(d.join("target/run")).unwrap().uid(), 0);
    fs::remove_dir_all(&d).unwrap();
}
