//! A worker thread's connections: one task per connection of `-c` on the thread's single-threaded
//! runtime, each speaking the run's engine ([`crate::protocol::Protocol`]): the one place that
//! names the engines. The request loop (request_loop.rs) is the same for every engine.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::sleep_until;

use crate::http2::H2Stream;
use crate::hyper_client::HyperConn;
use crate::pacer::{Pacer, Schedule};
use crate::plan::RunPlan;
use crate::report::Engine;
use crate::request_loop::slot;
use crate::stats::ThreadRecorder;

/// One connection of `-c`, from its ramp-up to the end of the run: one request slot, or, over
/// HTTP/2, `--streams` slots sharing the connection.
pub(crate) async fn connection(
    plan: Arc<RunPlan>,
    recorder: Rc<RefCell<ThreadRecorder>>,
    schedule: Option<Rc<Schedule>>,
    index: usize,
) {
    let ramp = plan
        .ramp_up
        .mul_f64(index as f64 / plan.connections.max(1) as f64);
    let start_at = plan.run_start + ramp;
    if start_at > Instant::now() {
        sleep_until(start_at.into()).await;
    }
    if plan.http2 {
        let shared = Rc::new(crate::http2::Shared::default());
        let mut streams = tokio::task::JoinSet::new();
        for stream in 0..plan.streams {
            let slot_index = index * plan.streams + stream;
            let (plan, recorder, shared) = (plan.clone(), recorder.clone(), shared.clone());
            let mut pacer = Pacer::new(&plan, slot_index, start_at, schedule.clone());
            streams.spawn_local(async move {
                slot::<H2Stream>(&plan, &recorder, &mut pacer, slot_index, &shared).await
            });
        }
        while streams.join_next().await.is_some() {}
        return;
    }
    let mut pacer = Pacer::new(&plan, index, start_at, schedule);
    match plan.engine {
        Engine::Builtin => {
            slot::<crate::http1::Connection>(&plan, &recorder, &mut pacer, index, &()).await
        }
        Engine::Hyper => slot::<HyperConn>(&plan, &recorder, &mut pacer, index, &()).await,
    }
}

/// How long requests in flight at the end of the run may take to finish before their connections
/// are dropped.
const DRAIN: Duration = Duration::from_secs(1);

/// Per-thread half of a run: this thread's connections on its own single-threaded runtime.
pub(crate) async fn run_thread_connections(
    plan: Arc<RunPlan>,
    recorder: Rc<RefCell<ThreadRecorder>>,
    connection_indices: Vec<usize>,
) {
    const TICK: Duration = Duration::from_millis(10);
    // Open loop: one timer for the thread's schedule (without a timerfd, tokio's timers).
    let schedule = plan
        .rate
        .as_ref()
        .and_then(|_| Schedule::new(plan.slots()).ok());
    let timer_task = schedule
        .clone()
        .map(|schedule| tokio::task::spawn_local(schedule.run()));
    let mut tasks = tokio::task::JoinSet::new();
    for index in connection_indices {
        tasks.spawn_local(connection(
            plan.clone(),
            recorder.clone(),
            schedule.clone(),
            index,
        ));
    }
    loop {
        tokio::select! {
            joined = tasks.join_next() => if joined.is_none() { break },
            _ = tokio::time::sleep(TICK) => {}
        }
        let now = Instant::now();
        recorder.borrow_mut().tick(now);
        if plan.over(now) {
            // No connection begins another request now. Those in flight may finish for up to
            // DRAIN (still counted as unfinished: the window is over), so their connections
            // close after reading the answer, with a FIN. Aborted with the answer unread, each
            // would make the kernel send a reset: ~10,000 at the end of every -c 10000 run.
            let drain_until = now + DRAIN.min(plan.timeout);
            loop {
                tokio::select! {
                    joined = tasks.join_next() => if joined.is_none() { break },
                    _ = tokio::time::sleep_until(drain_until.into()) => break,
                }
            }
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            break;
        }
    }
    if let Some(task) = timer_task {
        task.abort();
    }
}
