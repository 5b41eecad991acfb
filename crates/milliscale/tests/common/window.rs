//! What the retention window's tests share: a database with a window of
//! an hour on one store, and a table's rows.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use milliscale::{Database, Direction, Options, Table};
use objstore::ObjectStore;

/// Two workers, short segments, no background checkpoint, a window of an
/// hour.
pub fn options(store: &Arc<dyn ObjectStore>) -> Options {
    Options::new()
        .add_store_handle(Arc::clone(store))
        .workers(2)
        .segment_parts_max(8)
        .checkpoint_log_bytes(0)
        .store_deadline(Duration::from_secs(5))
        .retention(Some(Duration::from_secs(3600)))
}

/// Every row of `t`, in key order, at the current snapshot.
pub fn rows(db: &Database, t: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut tx = db.begin().expect("begin");
    tx.scan(t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX).expect("scan")
}
