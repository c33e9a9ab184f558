//! The bounded pool every CPU-bound step of a request runs on (reading a job, `from`'s
//! training configs, estimating, planning, analyzing), never the async runtime: the runtime
//! is one thread, so work on it would stall every other connection, and the request timeout
//! could not fire. At most `WORKERS` such steps run at once (tokio's blocking threads, each
//! holding a permit of one semaphore); a request waits for a permit within its own deadline.
//!
//! When a request's deadline passes, `guard` drops its future; the `Cancel` it handed its work
//! is then set, so the work stops at its next check (queued work never starts; a plan's search
//! stops between layouts) and gives its permit back.

use super::api_error::ApiError;
use axum::http::StatusCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Steps run at once: the machine's cores, at least 4 (so that a long request, or one waiting
/// on the Hub's answers, leaves room for others) and at most 16.
pub fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .clamp(4, 16)
}

/// The permits of the pool, shared by every request.
#[derive(Clone)]
pub struct Pool(Arc<Semaphore>);

impl Pool {
    pub fn new(workers: usize) -> Self {
        Pool(Arc::new(Semaphore::new(workers)))
    }
}

/// Set when the request the work answers is gone (timed out, or the client left).
#[derive(Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

/// What work that stopped because its request was cancelled returns as its error.
pub const CANCELLED: &str = "the request was cancelled (its deadline passed)";

impl Cancel {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err(CANCELLED)` once the request is gone: for `?` between the steps of a work.
    pub fn check(&self) -> Result<(), String> {
        if self.is_set() {
            return Err(CANCELLED.into());
        }
        Ok(())
    }

    /// A closure for searches that take a stop test (`plan`).
    pub fn as_stop(&self) -> impl Fn() -> bool + Sync + '_ {
        move || self.is_set()
    }
}

/// Sets the flag when dropped: held by the request's future, so that dropping the future
/// (the deadline) cancels the work it started.
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0 .0.store(true, Ordering::Relaxed);
    }
}

/// Runs `work` on the pool once a permit is free: its `Err` is a 400, a panic a 500. The work
/// gets the request's `Cancel` to check between its steps; work whose request is already gone
/// when its permit comes does not start.
pub async fn run<T, F>(pool: &Pool, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Cancel) -> Result<T, String> + Send + 'static,
{
    let permit = pool
        .0
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| internal())?;
    let cancel = Cancel::default();
    let _on_drop = CancelOnDrop(cancel.clone());
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        cancel.check()?;
        work(&cancel)
    });
    match task.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(msg)) => Err(ApiError::bad(msg)),
        Err(_) => Err(internal()),
    }
}

fn internal() -> ApiError {
    ApiError(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal error while answering this request".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A request dropped at its deadline sets its work's flag, and the work (polling it)
    /// stops and gives its permit back: with one permit, a second request then runs.
    #[test]
    fn a_dropped_request_cancels_its_work_and_frees_its_permit() {
        rt().block_on(async {
            let pool = Pool::new(1);
            let spin = run(&pool, |c: &Cancel| {
                let end = Instant::now() + Duration::from_secs(60);
                while Instant::now() < end {
                    c.check()?;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok("finished")
            });
            let timed_out = tokio::time::timeout(Duration::from_millis(200), spin).await;
            assert!(timed_out.is_err(), "the spinning work is still running");
            let t = Instant::now();
            let next = tokio::time::timeout(Duration::from_secs(10), run(&pool, |_| Ok(7))).await;
            assert_eq!(next.unwrap().unwrap(), 7);
            assert!(t.elapsed() < Duration::from_secs(10));
        });
    }

    /// Work that errs is a 400 with its message; a panic is a 500.
    #[test]
    fn errors_and_panics() {
        rt().block_on(async {
            let pool = Pool::new(2);
            let e = run::<(), _>(&pool, |_| Err("bad job".into()))
                .await
                .unwrap_err();
            assert_eq!((e.0, e.1.as_str()), (StatusCode::BAD_REQUEST, "bad job"));
            let e = run::<(), _>(&pool, |_| panic!("boom")).await.unwrap_err();
            assert_eq!(e.0, StatusCode::INTERNAL_SERVER_ERROR);
        });
    }
}
