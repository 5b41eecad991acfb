//! Retrying a store request: throttling (503 SlowDown) and transient
//! errors are retried with capped exponential backoff until a deadline.
//! Used for the requests at open, the manifest's and the checkpoints'; the
//! log's appends have their own policy (`log::segment::RetryPolicy`),
//! which also reconciles an append whose outcome is unknown.

/// Run a store request, retrying throttling and transient errors with
/// capped exponential backoff until `deadline` has passed.
pub(crate) fn retry<T>(
    deadline: std::time::Duration,
    mut f: impl FnMut() -> objstore::Result<T>,
) -> objstore::Result<T> {
    let started = milliscale_seam::now();
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        match f() {
            Err(e)
                if e.is_retryable()
                    && milliscale_seam::Elapsed::elapsed_now(&started) < deadline =>
            {
                milliscale_seam::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(500));
            }
            r => return r,
        }
    }
}
