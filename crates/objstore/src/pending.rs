//! Appends in flight: the submit/complete split of
//! [`ObjectStore::start_append`](crate::ObjectStore::start_append).
//!
//! A store with an asynchronous client lets its caller send an append and
//! go on: the caller gets a [`PendingAppend`], asks it now and then whether
//! the answer is in ([`PendingAppend::poll`], never blocks), and blocks on
//! it only when it has nothing else to do ([`PendingAppend::wait`]). That
//! is how a device's submission and completion queues are used (Autonomous Commit's
//! workers poll theirs between transactions), and what a synchronous call
//! cannot give a thread that has work to do while its write is out.
//!
//! A pending append is a chain of **stages**: each is due at an instant
//! and, once due, runs a step that gives the answer or the next stage (a
//! hedged append: the first request's answer, then, if it failed, its
//! twin's). The simulated store builds them from its latency draws; the
//! steps run on the thread that polls or waits, so no thread of the store
//! is involved.
//!
//! A stage can also ask elsewhere: an asynchronous client's task answers
//! through a channel (`s3://`).
//!
//! A request that was sent cannot be called back: dropping a pending
//! append runs its remaining steps (the write lands, or fails, as the
//! store decided when it was sent), or leaves the client's task to run,
//! and the answer is lost.

use std::time::Instant;

use crate::{Hedge, ObjectMeta, Result};

/// The answer to an append, and what its hedge did.
pub type AppendAnswer = (Result<ObjectMeta>, Hedge);

/// The step a stage runs once it is due.
pub type Step = Box<dyn FnOnce() -> Stage + Send>;

/// Where a pending append is.
pub enum Stage {
    /// The answer is in.
    Done(AppendAnswer),
    /// Nothing can be known before `at`; then `step` runs.
    At(Instant, Step),
    /// The answer comes from elsewhere (an asynchronous client's task):
    /// the function looks for it, blocking if asked to; `None` only when
    /// not blocking and it is not in yet.
    Ask(Box<dyn FnMut(bool) -> Option<AppendAnswer> + Send>),
}

/// An append in flight; see the module docs.
pub struct PendingAppend {
    stage: Option<Stage>,
}

impl std::fmt::Debug for PendingAppend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.stage {
            Some(Stage::Done(a)) => {
                write!(f, "PendingAppend(done: {:?})", a.0.as_ref().map(|m| m.size))
            }
            Some(Stage::At(at, _)) => write!(f, "PendingAppend(due at {at:?})"),
            Some(Stage::Ask(_)) => write!(f, "PendingAppend(asked elsewhere)"),
            None => write!(f, "PendingAppend(answered)"),
        }
    }
}

impl PendingAppend {
    /// An append whose first stage is `stage`.
    pub fn new(stage: Stage) -> PendingAppend {
        PendingAppend { stage: Some(stage) }
    }

    /// An append whose answer is already known.
    pub fn done(answer: AppendAnswer) -> PendingAppend {
        PendingAppend::new(Stage::Done(answer))
    }

    /// The answer if it is in, without blocking; `None` while the append is
    /// in flight. After it returned the answer, it returns `None`.
    pub fn poll(&mut self) -> Option<AppendAnswer> {
        loop {
            match self.stage.take()? {
                Stage::Done(answer) => return Some(answer),
                Stage::At(at, step) if milliscale_seam::now() >= at => self.stage = Some(step()),
                Stage::Ask(mut ask) => {
                    let answer = ask(false);
                    if answer.is_none() {
                        self.stage = Some(Stage::Ask(ask));
                    }
                    return answer;
                }
                waiting => {
                    self.stage = Some(waiting);
                    return None;
                }
            }
        }
    }

    /// When the next stage is due (`None`: the answer is in or was taken,
    /// or no time is known).
    pub fn due(&self) -> Option<Instant> {
        match &self.stage {
            Some(Stage::At(at, _)) => Some(*at),
            _ => None,
        }
    }

    /// Block until the answer is in (sleeping until each stage is due).
    ///
    /// # Panics
    /// If the answer was already taken by [`PendingAppend::poll`].
    pub fn wait(mut self) -> AppendAnswer {
        loop {
            match self.stage.take().expect("an append is answered once") {
                Stage::Done(answer) => return answer,
                Stage::At(at, step) => {
                    crate::sleep::latency_sleep(
                        at.saturating_duration_since(milliscale_seam::now()),
                    );
                    self.stage = Some(step());
                }
                Stage::Ask(mut ask) => return ask(true).expect("a blocking ask answers"),
            }
        }
    }
}

impl Drop for PendingAppend {
    fn drop(&mut self) {
        // Sent is sent: the store does what it decided, unheard.
        while let Some(Stage::At(_, step)) = self.stage.take() {
            self.stage = Some(step());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    fn meta(size: u64) -> ObjectMeta {
        ObjectMeta { key: "k".into(), size, etag: String::new(), parts: None, modified: None }
    }

    #[test]
    fn a_pending_append_answers_once_after_its_stages() {
        let ran = Arc::new(AtomicU32::new(0));
        let r = Arc::clone(&ran);
        let later = Instant::now() + Duration::from_millis(20);
        let mut p = PendingAppend::new(Stage::At(
            Instant::now(),
            Box::new(move || {
                r.fetch_add(1, Ordering::SeqCst);
                Stage::At(later, Box::new(|| Stage::Done((Ok(meta(7)), Hedge::Won))))
            }),
        ));
        // The first stage is due: it runs; the second is not yet.
        assert!(p.poll().is_none());
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(p.due(), Some(later));
        let (r, hedge) = p.wait();
        assert!(Instant::now() >= later);
        assert_eq!((r.map(|m| m.size).ok(), hedge), (Some(7), Hedge::Won));
    }

    #[test]
    fn a_dropped_append_still_lands() {
        let landed = Arc::new(AtomicU32::new(0));
        let l = Arc::clone(&landed);
        let p = PendingAppend::new(Stage::At(
            Instant::now() + Duration::from_secs(3600),
            Box::new(move || {
                l.fetch_add(1, Ordering::SeqCst);
                Stage::Done((Ok(meta(1)), Hedge::NotSent))
            }),
        ));
        drop(p);
        assert_eq!(landed.load(Ordering::SeqCst), 1);
    }
}
