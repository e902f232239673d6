//! Timed waits of the connection API cost no thread each (its own test binary: it counts
//! the process's threads, which other tests running beside it would change).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use softrdma_driver::conn::Endpoint;

fn ip(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, a, b))
}

/// The threads of this process (Linux: one directory per task).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// 1,000 concurrent timed waits on one endpoint (async connection requests that never
/// come, each bounded by a timeout) are 1,000 entries in the process's one timer, not
/// 1,000 threads; the entries go when the waits end.
#[test]
fn a_thousand_timed_waits_do_not_start_a_thousand_threads() {
    use softrdma_driver::wait::{block_on, pending_timers, within};
    let s = Endpoint::bind(SocketAddr::new(ip(90, 1), 7000)).unwrap();
    let listener = s.listen().unwrap();
    let before = threads();
    let waits = (0..1000).map(|_| within(Duration::from_millis(300), listener.incoming_async()));
    let all = async {
        let mut futs: Vec<_> = waits.map(Box::pin).collect();
        // Poll every wait once (each registers its deadline), then let them time out.
        let mut during = (0, 0);
        std::future::poll_fn(|cx| {
            for f in futs.iter_mut() {
                let _ = f.as_mut().poll(cx);
            }
            std::task::Poll::Ready(())
        })
        .await;
        during.0 = threads();
        during.1 = pending_timers();
        for f in futs {
            assert!(f.await.is_none(), "no request came");
        }
        during
    };
    let (during_threads, during_timers) = block_on(all);
    assert!(during_timers >= 1000, "{during_timers} timers pending");
    assert!(
        during_threads <= before + 2,
        "{during_threads} threads during 1,000 timed waits (before: {before})"
    );
    assert!(
        pending_timers() < 1000,
        "the ended waits' deadlines are gone"
    );
}
