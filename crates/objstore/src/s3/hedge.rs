//! Two requests for the same answer in flight together (a hedge), settled:
//! the rule shared by the S3 client's hedged reads and hedged appends.

use std::future::Future;

use crate::Hedge;

/// Two requests for the same thing, in flight together: the first answer
/// that `is_final` accepts wins, and the other request is dropped
/// (cancelled in flight). An answer it does not accept waits for the
/// other request's, which is then the answer, whatever it is (of two
/// failures, the later). The hedge is `Lost` when the first request's
/// answer is used, `Won` when the second's is.
///
/// A hedged append accepts only a success (a refusal is often the sign
/// that the twin landed); a hedged read accepts any answer but a failure
/// to answer (throttled, transient).
///
/// `answered(0)` is called when the first request answers or is
/// cancelled, `answered(1)` the same for the second: each once.
pub(super) async fn first_final<T>(
    first: impl Future<Output = T>,
    second: impl Future<Output = T>,
    is_final: impl Fn(&T) -> bool,
    mut answered: impl FnMut(usize),
) -> (T, Hedge) {
    let used = |request: usize| if request == 0 { Hedge::Lost } else { Hedge::Won };
    tokio::pin!(first);
    tokio::pin!(second);
    let (r, request) = tokio::select! {
        r = &mut first => (r, 0),
        r = &mut second => (r, 1),
    };
    answered(request);
    let other = 1 - request;
    if is_final(&r) {
        answered(other);
        return (r, used(request));
    }
    let r = if other == 0 { first.await } else { second.await };
    answered(other);
    (r, used(other))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    type Answer = std::result::Result<&'static str, &'static str>;

    /// An answer after `ms` milliseconds.
    async fn after(ms: u64, answer: Answer) -> Answer {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        answer
    }

    /// Settle two answers, recording the order in which each request was
    /// answered or cancelled.
    fn settle(first: (u64, Answer), second: (u64, Answer)) -> (Answer, Hedge, Vec<usize>) {
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
        let mut order = Vec::new();
        let (r, hedge) = rt.block_on(first_final(
            after(first.0, first.1),
            after(second.0, second.1),
            Result::is_ok,
            |request| order.push(request),
        ));
        (r, hedge, order)
    }

    /// The flaky case seen in CI: the twin's refusal arrives before the
    /// landed request's success. The success is what the append did.
    #[test]
    fn a_refusal_waits_for_its_twin_that_landed() {
        let (r, hedge, order) = settle((40, Ok("landed")), (1, Err("refused")));
        assert_eq!((r, hedge, order), (Ok("landed"), Hedge::Lost, vec![1, 0]));
        let (r, hedge, order) = settle((1, Err("refused")), (40, Ok("landed")));
        assert_eq!((r, hedge, order), (Ok("landed"), Hedge::Won, vec![0, 1]));
    }

    /// A success wins at once and the other request is cancelled (counted
    /// as it goes); of two failures, the later one is the answer.
    #[test]
    fn a_success_wins_and_two_failures_report_the_later() {
        let started = std::time::Instant::now();
        let (r, hedge, order) = settle((1, Ok("first")), (5_000, Ok("second")));
        assert_eq!((r, hedge, order), (Ok("first"), Hedge::Lost, vec![0, 1]));
        assert!(started.elapsed() < Duration::from_secs(4), "waited for the loser");
        let (r, hedge, order) = settle((30, Err("late")), (1, Err("early")));
        assert_eq!((r, hedge, order), (Err("late"), Hedge::Lost, vec![1, 0]));
    }

    /// The read rule: any answer but a failure to answer wins (a "not
    /// found" too); a failure to answer waits for the twin.
    #[test]
    fn a_read_takes_the_first_answer_that_is_one() {
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
        let answer = |r: &Answer| *r != Err("throttled");
        let settle = |first: (u64, Answer), second: (u64, Answer)| {
            rt.block_on(first_final(
                after(first.0, first.1),
                after(second.0, second.1),
                answer,
                |_| {},
            ))
        };
        assert_eq!(settle((1, Err("not found")), (40, Ok("x"))), (Err("not found"), Hedge::Lost));
        assert_eq!(settle((1, Err("throttled")), (40, Ok("x"))), (Ok("x"), Hedge::Won));
        assert_eq!(settle((40, Ok("x")), (1, Err("throttled"))), (Ok("x"), Hedge::Lost));
    }
}
