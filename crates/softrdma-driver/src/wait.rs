//! Waiting without a thread per wait: [`within`] bounds a future by a deadline kept in one
//! process-wide timer (one thread, started on first use, sleeping until the earliest
//! deadline — what quinn's runtime timer is to its tasks), and [`block_on`] runs a future
//! on the calling thread, so that every blocking call of [`crate::conn`] is its async
//! body run to completion, not a second copy of it.
//!
//! A timed wait costs a map entry while it is pending, removed when the wait ends either
//! way: a thousand concurrent timed waits are a thousand entries and one thread.
//!
//! `Waiters`: the threads (a condition variable) and tasks (wakers) waiting for what a
//! device's loop or a node's CM produces, woken together.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process's timer: pending deadlines, each with the task to wake.
struct Timer {
    due: Mutex<BTreeMap<(Instant, u64), Waker>>,
    /// Signalled when a deadline earlier than every other is added.
    cv: Condvar,
    next_key: AtomicU64,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let t: &'static Timer = Box::leak(Box::new(Timer {
            due: Mutex::new(BTreeMap::new()),
            cv: Condvar::new(),
            next_key: AtomicU64::new(0),
        }));
        // If the thread cannot be started, deadlines are still checked whenever the
        // future is polled; only the wake-up at the deadline is lost.
        let _ = std::thread::Builder::new()
            .name("softrdma-timer".into())
            .spawn(move || t.run());
        t
    })
}

impl Timer {
    fn run(&self) {
        let mut due = lock(&self.due);
        loop {
            let now = Instant::now();
            while let Some(entry) = due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                entry.remove().wake();
            }
            due = match due.first_key_value().map(|(k, _)| k.0) {
                Some(at) => {
                    let left = at.saturating_duration_since(now);
                    self.cv
                        .wait_timeout(due, left)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0)
                }
                None => self.cv.wait(due).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }

    /// Wakes `waker` at `at`; returns the entry's key (to replace or cancel it).
    fn add(&self, at: Instant, waker: Waker) -> (Instant, u64) {
        let key = (at, self.next_key.fetch_add(1, Ordering::Relaxed));
        let mut due = lock(&self.due);
        let first = due.first_key_value().is_none_or(|(k, _)| key < *k);
        due.insert(key, waker);
        if first {
            self.cv.notify_one();
        }
        key
    }

    /// Replaces the waker of a pending entry (a task polled again from elsewhere); false
    /// when the entry already fired.
    fn update(&self, key: (Instant, u64), waker: &Waker) -> bool {
        match lock(&self.due).get_mut(&key) {
            Some(w) => {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
                true
            }
            None => false,
        }
    }

    fn cancel(&self, key: (Instant, u64)) {
        lock(&self.due).remove(&key);
    }
}

/// How many timed waits are pending in the process's timer.
pub fn pending_timers() -> usize {
    lock(&timer().due).len()
}

/// `fut`, or `None` if `timeout` passes first. Any executor: the process's one timer
/// thread wakes the task at the deadline.
pub async fn within<F: Future>(timeout: Duration, fut: F) -> Option<F::Output> {
    Within {
        fut: Box::pin(fut),
        end: Instant::now() + timeout,
        key: None,
    }
    .await
}

struct Within<F> {
    fut: std::pin::Pin<Box<F>>,
    end: Instant,
    key: Option<(Instant, u64)>,
}

impl<F: Future> Future for Within<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(v) = self.fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        if Instant::now() >= self.end {
            return Poll::Ready(None);
        }
        let t = timer();
        match self.key {
            Some(k) if t.update(k, cx.waker()) => {}
            _ => {
                let end = self.end;
                self.key = Some(t.add(end, cx.waker().clone()));
            }
        }
        Poll::Pending
    }
}

impl<F> Drop for Within<F> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            timer().cancel(k);
        }
    }
}

/// Wakes the thread that runs [`block_on`].
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `fut` to completion on this thread, parking between polls.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// Threads and tasks waiting for something a lock guards (a device's completions, a node's
/// CM events), woken together by [`Waiters::signal`].
#[derive(Default)]
pub(crate) struct Waiters {
    cv: Condvar,
    /// Threads in [`Waiters::wait`] (counted under the caller's lock before waiting):
    /// `notify_all` is a futex syscall even with nobody waiting, and signals come after
    /// every loop turn.
    cv_waiters: AtomicUsize,
    wakers: Mutex<Vec<Waker>>,
}

impl Waiters {
    /// Wakes the waiting threads and tasks.
    pub fn signal(&self) {
        if self.cv_waiters.load(Ordering::Acquire) > 0 {
            self.cv.notify_all();
        }
        let wakers = std::mem::take(&mut *relock(&self.wakers));
        for w in wakers {
            w.wake();
        }
    }

    /// Waits up to `d` for [`Waiters::signal`] with the lock `g` (taken before the caller
    /// looked for what it waits for, so a signal after the look finds this waiter
    /// counted). Returns the lock and whether the wait timed out.
    pub fn wait<'a, T>(&self, g: MutexGuard<'a, T>, d: Duration) -> (MutexGuard<'a, T>, bool) {
        self.cv_waiters.fetch_add(1, Ordering::AcqRel);
        let (g, r) = self
            .cv
            .wait_timeout(g, d)
            .unwrap_or_else(|p| p.into_inner());
        self.cv_waiters.fetch_sub(1, Ordering::AcqRel);
        (g, r.timed_out())
    }

    /// Registers a task for the next [`Waiters::signal`] (once, however often it asks).
    pub fn register(&self, w: &Waker) {
        let mut wakers = relock(&self.wakers);
        if !wakers.iter().any(|x| x.will_wake(w)) {
            wakers.push(w.clone());
        }
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_out_wait_ends_and_leaves_no_entry() {
        let never = std::future::pending::<()>();
        let t0 = Instant::now();
        assert_eq!(block_on(within(Duration::from_millis(20), never)), None);
        assert!(t0.elapsed() >= Duration::from_millis(20));
        // Only this test's entries are counted if none other runs concurrently; at least
        // this one is gone.
        assert!(lock(&timer().due)
            .keys()
            .all(|k| k.0 > t0 + Duration::from_millis(20)));
    }

    /// Pending once (waking itself), then ready.
    struct YieldOnce(bool);

    impl Future for YieldOnce {
        type Output = u32;
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            if self.0 {
                return Poll::Ready(7);
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn a_wait_that_completes_cancels_its_deadline() {
        let v = block_on(within(Duration::from_secs(3600), YieldOnce(false)));
        assert_eq!(v, Some(7));
        let far = Instant::now() + Duration::from_secs(3000);
        assert!(lock(&timer().due).keys().all(|k| k.0 < far));
    }
}
