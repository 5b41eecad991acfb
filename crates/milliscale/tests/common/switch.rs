//! A store that can be switched off: while it is down, every request
//! fails with a transient error (an outage, or a network partition on the
//! reader's side).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use objstore::{Bytes, ObjectMeta, ObjectStore, Result, StoreError};

#[derive(Debug)]
pub struct Switch {
    pub inner: Arc<dyn ObjectStore>,
    down: AtomicBool,
}

impl Switch {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Switch> {
        Arc::new(Switch { inner, down: AtomicBool::new(false) })
    }

    /// Take the store down (`true`) or bring it back.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn check(&self) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Transient("503 the store is down".into()))
        } else {
            Ok(())
        }
    }
}

impl ObjectStore for Switch {
    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.check()?;
        self.inner.put(key, body)
    }
    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.check()?;
        self.inner.put_if_absent(key, body)
    }
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        self.check()?;
        self.inner.put_if_match(key, body, etag)
    }
    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        self.check()?;
        self.inner.append(key, offset, body)
    }
    fn get(&self, key: &str) -> Result<Bytes> {
        self.check()?;
        self.inner.get(key)
    }
    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.check()?;
        self.inner.get_range(key, range)
    }
    fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.check()?;
        self.inner.head(key)
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.check()?;
        self.inner.list(prefix)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.check()?;
        self.inner.delete(key)
    }
}
