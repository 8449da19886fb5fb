//! Where the threads queued on a lock waited: the heaviest off-CPU stack of the waiting threads'
//! name that went to sleep in a futex wait, given to each lock of the run report. Stacks whose
//! innermost user frames name a lock call (pthread_mutex_lock, Mutex::lock_contended,
//! runtime.lock2) come before the others: the same threads also sleep on condition variables.

use crate::kernel_report::LockReport;
use crate::stacks::FoldedLine;

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

/// Fills each lock's `stack` from `group`'s off-CPU lines (thread name first, then frames from
/// the outermost; kernel frames end in `_[k]`).
pub(crate) fn attach(locks: &mut [LockReport], offcpu: &[FoldedLine], group: u32) {
    for lock in locks {
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
        attach(&mut locks, &lines, 0);
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
}
