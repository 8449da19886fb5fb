//! Where the threads queued on a lock waited: the heaviest off-CPU stack of the waiting threads'
//! name that went to sleep in a futex wait, given to each lock of the run report. Stacks whose
//! innermost user frames name a lock call (pthread_mutex_lock, Mutex::lock_contended,
//! runtime.lock2) come before the others: the same threads also sleep on condition variables.
//! Each holder is told what it did while the threads waited: where it slept, or where it ran.

use crate::kernel_report::{LockHolder, LockReport};
use crate::stacks::{FoldedLine, FoldedStacks};
use crate::tail_account::{Resource, hottest_function, wait_of};

/// A holder that slept through this share of the waits charged to it or more held the lock
/// across that sleep; below it, it is told as running.
pub(crate) const ASLEEP_SHARE: f64 = 0.5;

/// User frames kept per lock, the innermost ones (the lock call and its callers).
const LOCK_STACK_FRAMES: usize = 8;

/// The innermost user frames looked at for a lock call.
const LOCK_CALL_FRAMES: usize = 4;

/// Whether a stack's innermost user frames name a lock call rather than a condition variable's
/// or a parking spot's wait.
fn waits_in_a_lock_call(user: &[&String]) -> bool {
    let inner = &user[user.len().saturating_sub(LOCK_CALL_FRAMES)..];
    let named = |words: &[&str]| {
        inner.iter().any(|f| {
            let f = f.to_ascii_lowercase();
            words.iter().any(|w| f.contains(w))
        })
    };
    named(&["lock"]) && !named(&["cond", "park", "notesleep"])
}

/// What `holder` did while the threads it was charged with waited: asleep in a syscall (the
/// heaviest off-CPU stack of its name in that syscall: the wait's kernel function and the user
/// function that called it), or on a CPU (its hottest function).
fn doing(holder: &LockHolder, stacks: &FoldedStacks, group: u32) -> String {
    let mine = |l: &&FoldedLine| l.group == group && l.frames.first() == Some(&holder.comm);
    let share = holder.slept_share();
    let percent = |s: f64| (s * 100.0).round();
    match holder.slept_in.as_deref() {
        Some(syscall) if share >= ASLEEP_SHARE => {
            let wait = (stacks.offcpu.iter().filter(mine))
                .map(|l| (wait_of(&l.frames), l.value))
                .filter(|(w, _)| w.syscall.as_deref() == Some(syscall))
                .max_by_key(|(_, v)| *v)
                .map(|(w, _)| w);
            let on = wait.map_or(String::new(), |w| {
                // A request thread's kinds of idleness say nothing of a holder's wait: its kernel
                // function does.
                let what = match w.resource {
                    Resource::Work | Resource::Idle | Resource::Unknown | Resource::Other => None,
                    r => Some(r.label()),
                };
                let what = match (what, w.kernel) {
                    (None, None) => String::new(),
                    (None, Some(k)) => format!(" ({k})"),
                    (Some(r), None) => format!(" on {r}"),
                    (Some(r), Some(k)) => format!(" on {r} ({k})"),
                };
                let function = (w.function).map_or(String::new(), |f| format!(" in {f}"));
                format!("{what}{function}")
            });
            format!(
                "asleep in {syscall}{on} through {:.0}% of the waits: it held the lock across that call",
                percent(share)
            )
        }
        _ => {
            let oncpu: Vec<FoldedLine> = stacks.oncpu.iter().filter(mine).cloned().collect();
            let function = hottest_function(&oncpu, &stacks.modules)
                .map_or(String::new(), |f| format!(" in {f}"));
            format!(
                "running{function}, on a CPU or waiting for one, through {:.0}% of the waits",
                percent(1.0 - share)
            )
        }
    }
}

/// Fills each lock's `stack` from `group`'s off-CPU lines (thread name first, then frames from
/// the outermost; kernel frames end in `_[k]`), and its holders' `doing`.
pub(crate) fn attach(locks: &mut [LockReport], stacks: &FoldedStacks, group: u32) {
    let offcpu = &stacks.offcpu;
    for lock in locks {
        for holder in &mut lock.holders {
            holder.doing = Some(doing(holder, stacks, group));
        }
        let heaviest = offcpu
            .iter()
            .filter(|l| l.group == group)
            .filter(|l| l.frames.first() == Some(&lock.waiter_comm))
            .filter(|l| (l.frames.iter()).any(|f| f.ends_with("_[k]") && f.contains("futex_wait")))
            .map(|l| {
                let user: Vec<&String> = (l.frames.iter().skip(1))
                    .filter(|f| !f.ends_with("_[k]"))
                    .collect();
                (waits_in_a_lock_call(&user), l.value, user)
            })
            .max_by_key(|(lock_call, value, _)| (*lock_call, *value));
        if let Some((_, _, user)) = heaviest {
            let from = user.len().saturating_sub(LOCK_STACK_FRAMES);
            lock.stack = user[from..].iter().map(|f| f.to_string()).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(frames: &[&str], value: u64) -> FoldedLine {
        FoldedLine {
            group: 0,
            frames: frames.iter().map(|f| f.to_string()).collect(),
            value,
            periods: 0,
        }
    }

    #[test]
    fn a_lock_gets_the_heaviest_futex_stack_of_its_waiters_name() {
        let mut locks = vec![LockReport {
            waiter_comm: "conn".into(),
            ..Default::default()
        }];
        let lines = [
            // Heavier, but asleep in read: not a lock wait.
            line(
                &[
                    "conn",
                    "start_thread",
                    "conn_main",
                    "read",
                    "do_sys_read_[k]",
                ],
                900,
            ),
            line(
                &[
                    "conn",
                    "start_thread",
                    "conn_main",
                    "count_request",
                    "__lll_lock_wait",
                    "futex_wait_[k]",
                    "schedule_[k]",
                ],
                500,
            ),
            // Heavier, but a condition variable's wait.
            line(
                &[
                    "conn",
                    "start_thread",
                    "conn_main",
                    "pthread_cond_wait",
                    "futex_wait_[k]",
                ],
                700,
            ),
            // Another thread name's futex wait.
            line(&["refresh", "main", "lock", "futex_wait_[k]"], 800),
        ];
        let stacks = FoldedStacks {
            offcpu: lines.to_vec(),
            ..Default::default()
        };
        attach(&mut locks, &stacks, 0);
        assert_eq!(
            locks[0].stack,
            [
                "start_thread",
                "conn_main",
                "count_request",
                "__lll_lock_wait"
            ]
        );
    }

    /// A holder charged with 100 ms of waits, `slept_ms` of them asleep in read.
    fn holder(slept_ms: u64) -> LockHolder {
        LockHolder {
            tid: 10,
            comm: "cache-refresh".into(),
            waits: 10,
            wait_ns: 100_000_000,
            share: 1.0,
            slept_ns: slept_ms * 1_000_000,
            slept_in: (slept_ms > 0).then(|| "read".into()),
            doing: None,
        }
    }

    fn refresher_stacks() -> FoldedStacks {
        FoldedStacks {
            offcpu: vec![
                // Its sleeps between refreshes: heavier, but in nanosleep.
                line(
                    &[
                        "cache-refresh",
                        "refresh_main",
                        "nanosleep",
                        "do_nanosleep_[k]",
                    ],
                    800,
                ),
                line(
                    &[
                        "cache-refresh",
                        "refresh_main",
                        "rebuild_cache",
                        "read",
                        "ksys_read_[k]",
                        "pipe_read_[k]",
                    ],
                    200,
                ),
                // Another thread's read of a pipe.
                line(
                    &[
                        "conn",
                        "conn_main",
                        "wait_for_ticket",
                        "read",
                        "ksys_read_[k]",
                        "pipe_read_[k]",
                    ],
                    900,
                ),
            ],
            oncpu: vec![
                line(&["cache-refresh", "refresh_main", "rebuild_cache"], 50),
                line(&["cache-refresh", "refresh_main"], 5),
                line(&["conn", "conn_main", "parse"], 500),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn a_holder_asleep_under_the_lock_is_told_by_its_wait_and_one_running_by_its_function() {
        let stacks = refresher_stacks();
        let asleep = doing(&holder(90), &stacks, 0);
        assert_eq!(
            asleep,
            "asleep in read on a pipe (pipe_read) in rebuild_cache through 90% of the waits: it held the lock across that call"
        );
        let running = doing(&holder(10), &stacks, 0);
        assert_eq!(
            running,
            "running in rebuild_cache, on a CPU or waiting for one, through 90% of the waits"
        );
        assert_eq!(
            doing(&holder(0), &stacks, 0),
            "running in rebuild_cache, on a CPU or waiting for one, through 100% of the waits"
        );
    }
}
