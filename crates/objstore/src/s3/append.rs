//! An append request to S3 (`x-amz-write-offset-bytes`), and its hedge,
//! as a task on the store's runtime can send it.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::operation::put_object::{PutObjectError, PutObjectOutput};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumAlgorithm;
use bytes::Bytes;

use super::hedge::first_final;
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
    /// [`first_final`] (at its offset an append cannot land twice).
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
        // A success wins; a failure waits for the twin, because for a
        // hedged append it is often the sign that the twin landed: its
        // refusal (`InvalidWriteOffset`) can arrive before the twin's
        // success, and an answer lost on the way (a 5xx after the write)
        // hides a landed one. When both fail, the later failure is the
        // answer (as the simulator's), and the caller reconciles by
        // reading the object's size.
        let (r, hedge) = first_final(first, second, Result::is_ok, |request| {
            let elapsed = started.elapsed();
            let elapsed = if request == 0 { elapsed } else { elapsed.saturating_sub(hedge_after) };
            self.accounting.append_latency(elapsed);
        })
        .await;
        (Ok(r), hedge)
    }
}
