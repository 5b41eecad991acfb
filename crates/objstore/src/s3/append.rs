//! An append request to S3 (`x-amz-write-offset-bytes`), and its hedge,
//! as a task on the store's runtime can send it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::operation::put_object::{PutObjectError, PutObjectOutput};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumAlgorithm;
use bytes::Bytes;

use crate::Hedge;
use crate::Result;
use crate::sim::accounting::{Accounting, Kind};

/// An append request's answer as the SDK gives it (the outer error: it
/// could not be sent).
pub(super) type RawAppend =
    Result<std::result::Result<PutObjectOutput, SdkError<PutObjectError, HttpResponse>>>;

/// An append request, with what it needs apart from the store itself, so
/// that a task on the runtime can send it (and its hedge).
pub(super) struct AppendRequest {
    pub(super) client: Client,
    pub(super) bucket: String,
    /// The full key (prefix included).
    pub(super) key: String,
    pub(super) offset: u64,
    pub(super) accounting: Arc<Accounting>,
}

impl AppendRequest {
    /// The object's size once `body` lands.
    pub(super) fn size(&self, body: &Bytes) -> u64 {
        self.offset + body.len() as u64
    }

    /// Send one request with `body`, counted.
    fn send(
        &self,
        body: Bytes,
    ) -> impl std::future::Future<
        Output = std::result::Result<PutObjectOutput, SdkError<PutObjectError, HttpResponse>>,
    > + use<> {
        self.accounting.request(Kind::Append, body.len() as u64);
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&self.key)
            .body(ByteStream::from(body))
            .write_offset_bytes(self.offset as i64)
            .checksum_algorithm(ChecksumAlgorithm::Crc32C)
            .customize()
            .disable_payload_signing()
            .send()
    }

    /// The append, and with `hedge_after` its hedge: if no answer has come
    /// by then, the same bytes go again, and the answers are settled by
    /// [`first_success`].
    pub(super) async fn race(
        self,
        body: Bytes,
        hedge_after: Option<Duration>,
    ) -> (RawAppend, Hedge) {
        let started = std::time::Instant::now();
        let first = self.send(body.clone());
        tokio::pin!(first);
        let Some(hedge_after) = hedge_after else {
            let r = first.await;
            self.accounting.append_latency(started.elapsed());
            return (Ok(r), Hedge::NotSent);
        };
        tokio::select! {
            r = &mut first => {
                self.accounting.append_latency(started.elapsed());
                return (Ok(r), Hedge::NotSent);
            }
            () = tokio::time::sleep(hedge_after) => {}
        }
        let second = self.send(body);
        // Every request sent counts once in the store's latencies, as
        // the simulator counts them: a loser cancelled, with the time it
        // had taken so far (a lower bound). Counting only the winner
        // would drop the slow requests that hedging exists for, and
        // flatter the store's tail.
        let (r, hedge) = first_success(first, second, |request| {
            let elapsed = started.elapsed();
            let elapsed = if request == 0 { elapsed } else { elapsed.saturating_sub(hedge_after) };
            self.accounting.append_latency(elapsed);
        })
        .await;
        (Ok(r), hedge)
    }
}

/// Two requests with the same bytes at the same offset, in flight
/// together: the first success wins, and the other is dropped (cancelled
/// in flight; at its offset it cannot land twice). A failure does not
/// win: it waits for the other request's answer, because for a hedged
/// append a failure is often the sign that the twin landed. Its refusal
/// (`InvalidWriteOffset`) can arrive before the twin's success, and an
/// answer lost on the way (a 5xx after the write) hides a landed one.
/// When both fail, the later failure is the answer (as the simulator's),
/// and the caller reconciles by reading the object's size.
///
/// `answered(0)` is called when the first request answers or is
/// cancelled, `answered(1)` the same for the second: each once.
async fn first_success<T, E>(
    first: impl Future<Output = std::result::Result<T, E>>,
    second: impl Future<Output = std::result::Result<T, E>>,
    mut answered: impl FnMut(usize),
) -> (std::result::Result<T, E>, Hedge) {
    let used = |request: usize| if request == 0 { Hedge::Lost } else { Hedge::Won };
    tokio::pin!(first);
    tokio::pin!(second);
    let (r, request) = tokio::select! {
        r = &mut first => (r, 0),
        r = &mut second => (r, 1),
    };
    answered(request);
    let other = 1 - request;
    if r.is_ok() {
        answered(other);
        return (r, used(request));
    }
    let r = if other == 0 { first.await } else { second.await };
    answered(other);
    (r, used(other))
}

#[cfg(test)]
mod tests {
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
        let (r, hedge) = rt.block_on(first_success(
            after(first.0, first.1),
            after(second.0, second.1),
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
}
