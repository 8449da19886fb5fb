//! The current task's syscall, read from the registers its kernel entry saved: its number and
//! arguments (x86-64's pt_regs and numbering).

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{bpf_get_current_task_btf, bpf_probe_read_user, bpf_task_pt_regs},
};
use srvprof_common::MAX_SYSCALL_NR;

/// The syscall the current task is in, plus one; 0 when it is not in one. A task's kernel entry
/// from user space saves its registers at the top of its kernel stack, and orig_ax there holds
/// the syscall number, or -1 for an interrupt or an exception (a page fault, a preemption of
/// user code): each entry overwrites it, so it names what the task is inside now. Read with a
/// direct load through the helper's typed pointer (the verifier checks it against pt_regs in
/// the kernel's BTF), not a probe_read helper call: this runs at every switch of a watched
/// thread. pt_regs is x86-64's, as are the syscall numbers.
#[inline(always)]
pub fn current_syscall_slot() -> u64 {
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const pt_regs;
    if regs.is_null() {
        return 0;
    }
    let nr = unsafe { (*regs).orig_rax } as i64;
    if nr >= 0 && nr < MAX_SYSCALL_NR as i64 {
        nr as u64 + 1
    } else {
        0
    }
}

/// The file descriptor the current task's syscall was given: sendfile's source (its second
/// argument), else the first argument, which is an fd for read, pread64, readv, write, fsync,
/// and the other calls that wait on a file (user space keeps the fd only for those). Read from
/// the registers saved at the syscall's entry, as current_syscall_slot reads its number.
#[inline(always)]
pub fn current_syscall_fd(slot: u64) -> i32 {
    const SENDFILE: u64 = 40;
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const pt_regs;
    if regs.is_null() || slot == 0 {
        return -1;
    }
    let arg = if slot == SENDFILE + 1 {
        unsafe { (*regs).rsi }
    } else {
        unsafe { (*regs).rdi }
    };
    if arg <= i32::MAX as u64 {
        arg as i32
    } else {
        -1
    }
}

/// The first three arguments of the current task's syscall (for futex(2): the word's address,
/// the operation and the value), read as current_syscall_fd reads them.
#[inline(always)]
pub fn current_syscall_args() -> (u64, u64, u64) {
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const pt_regs;
    if regs.is_null() {
        return (0, 0, 0);
    }
    unsafe { ((*regs).rdi, (*regs).rsi, (*regs).rdx) }
}

/// Where the current task's sendto(2), sendmsg(2) or sendmmsg(2) sends (a user pointer to its
/// struct sockaddr; sendmmsg's first message's): sendto's fifth argument, a msghdr's msg_name
/// (its first field; an mmsghdr begins with its msghdr). 0 for another syscall or none given.
#[inline(always)]
pub fn current_send_destination() -> u64 {
    const SENDTO: u64 = 44;
    const SENDMSG: u64 = 46;
    const SENDMMSG: u64 = 307;
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const pt_regs;
    if regs.is_null() {
        return 0;
    }
    let (nr, rsi, r8) = unsafe { ((*regs).orig_rax, (*regs).rsi, (*regs).r8) };
    match nr {
        SENDTO => r8,
        // SAFETY: a read of the task's own memory through the helper, which checks the address.
        SENDMSG | SENDMMSG => unsafe { bpf_probe_read_user(rsi as *const u64) }.unwrap_or(0),
        _ => 0,
    }
}
