//! Fan-out: one function over many items on a few threads (recovery's log
//! scan and replay, checkpoint loads, a read replica's catch-up).

use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` over `items` on up to `threads` threads; results in item order.
pub(crate) fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Vec<parking_lot::Mutex<Option<R>>> =
        items.iter().map(|_| parking_lot::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1).min(items.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    *out[i].lock() = Some(f(item));
                }
            });
        }
    });
    out.into_iter().map(|m| m.into_inner().expect("every item mapped")).collect()
}
