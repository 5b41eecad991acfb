//! The s3 backend against MinIO, a third-party S3 server, for every
//! operation MinIO supports; and the capability probe against it (MinIO
//! refuses write offsets, so it must be put-per-flush).
//!
//! `scripts/test.sh` builds MinIO (cached), starts it on loopback and sets
//! `MILLISCALE_TEST_S3_ENDPOINT`; it also sets `MILLISCALE_REQUIRE_S3=1`, so
//! in CI a missing server fails this test instead of skipping it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use objstore::probe::{AppendSupport, probe_appends};
use objstore::{ObjectStore, S3Store, conformance};

static NEXT: AtomicU64 = AtomicU64::new(0);

fn endpoint() -> Option<String> {
    match std::env::var("MILLISCALE_TEST_S3_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(e),
        _ => {
            assert!(
                std::env::var("MILLISCALE_REQUIRE_S3").is_err(),
                "MILLISCALE_REQUIRE_S3 is set but MILLISCALE_TEST_S3_ENDPOINT is not"
            );
            eprintln!("skipped: no S3 endpoint (run scripts/test.sh to start MinIO)");
            None
        }
    }
}

/// A store on a fresh prefix of the test bucket.
fn store(ep: &str) -> Arc<dyn ObjectStore> {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let url = format!("s3://milliscale-test/run-{}-{n}?endpoint={ep}", std::process::id());
    let s = S3Store::from_url(&url).expect("s3 store");
    s.create_bucket().expect("bucket");
    Arc::new(s)
}

#[test]
fn minio_conforms_for_the_operations_it_supports() {
    let Some(ep) = endpoint() else { return };
    conformance::put_get_head_delete(&*store(&ep));
    conformance::conditional_puts(&*store(&ep));
    conformance::listing(&*store(&ep));
    // Key limits need the whole 1,024 bytes, so a bucket without a prefix.
    let bare = S3Store::from_url(&format!("s3://milliscale-keys?endpoint={ep}")).expect("s3");
    bare.create_bucket().expect("bucket");
    conformance::keys(&bare);
    let prefixed = store(&ep);
    let long = "k".repeat(objstore::KEY_BYTES_MAX);
    assert!(
        matches!(
            prefixed.put(&long, objstore::Bytes::new()),
            Err(objstore::StoreError::InvalidRequest(_))
        ),
        "the prefix counts against the key limit"
    );
    conformance::concurrent_put_if_absent(&|| store(&ep), 16, 20);
    // Ranges on a plain object (MinIO has no appends to build parts with).
    let s = store(&ep);
    s.put("r/o", objstore::Bytes::from_static(b"0123456789")).expect("put");
    assert_eq!(s.get_range("r/o", 2..5).expect("range"), objstore::Bytes::from_static(b"234"));
    assert_eq!(s.get_range("r/o", 7..100).expect("clipped"), objstore::Bytes::from_static(b"789"));
    assert!(matches!(s.get_range("r/o", 10..12), Err(objstore::StoreError::InvalidRange { .. })));
}

#[test]
fn the_probe_puts_minio_in_put_per_flush_mode() {
    let Some(ep) = endpoint() else { return };
    match probe_appends(&*store(&ep), "probe/k").expect("the probe decides") {
        AppendSupport::PutPerFlush { reason } => eprintln!("MinIO: {reason}"),
        AppendSupport::Appends => panic!("MinIO does not append, but passed the probe"),
    }
}
