//! [`Buckets`] as one [`ObjectStore`] keyed `bucket/key`, with S3's ETags
//! (`objects`); the `sim` store wraps it.

use std::ops::Range;

use bytes::Bytes;
use objstore::{ObjectMeta, ObjectStore, Result, StoreError};

use crate::buckets::Buckets;
use crate::objects::{Attrs, Precondition};

/// `bucket/key` split into its parts.
fn split(path: &str) -> Result<(&str, &str)> {
    path.split_once('/').ok_or_else(|| {
        StoreError::InvalidRequest(format!("emulator keys are bucket/key, got {path:?}"))
    })
}

fn with_path(bucket: &str, mut m: ObjectMeta) -> ObjectMeta {
    m.key = format!("{bucket}/{}", m.key);
    m
}

/// The object operations, keyed `bucket/key`, with S3's ETags; the `sim`
/// store wraps this.
impl ObjectStore for Buckets {
    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let (b, k) = split(key)?;
        let o = self.put_object(b, k, body, Precondition::None, Attrs::default())?;
        Ok(with_path(b, o.meta(k)))
    }

    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let (b, k) = split(key)?;
        let o = self.put_object(b, k, body, Precondition::IfAbsent, Attrs::default())?;
        Ok(with_path(b, o.meta(k)))
    }

    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        let (b, k) = split(key)?;
        let pre = Precondition::IfMatch(etag.to_owned());
        let o = self.put_object(b, k, body, pre, Attrs::default())?;
        Ok(with_path(b, o.meta(k)))
    }

    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        let (b, k) = split(key)?;
        let o = self.append_object(b, k, offset, body, Precondition::None)?;
        Ok(with_path(b, o.meta(k)))
    }

    fn get(&self, key: &str) -> Result<Bytes> {
        let (b, k) = split(key)?;
        self.bucket(b)?.data.get(k)
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let (b, k) = split(key)?;
        self.bucket(b)?.data.get_range(k, range)
    }

    fn head(&self, key: &str) -> Result<ObjectMeta> {
        let (b, k) = split(key)?;
        Ok(with_path(b, self.head_object(b, k)?.meta(k)))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let (b, p) = split(prefix)?;
        Ok(self.list_objects(b, p)?.into_iter().map(|o| with_path(b, o.meta(&o.key))).collect())
    }

    fn delete(&self, key: &str) -> Result<()> {
        let (b, k) = split(key)?;
        self.delete_object(b, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buckets::{Backing, BucketError};

    #[test]
    fn keys_route_to_their_bucket() {
        let b = Buckets::open(Backing::Memory, 10_000).expect("open");
        b.create("one").expect("create");
        b.create("two").expect("create");
        assert_eq!(b.create("one"), Err(BucketError::AlreadyExists));
        b.put("one/a/b", Bytes::from_static(b"1")).expect("put");
        b.put("two/a/b", Bytes::from_static(b"22")).expect("put");
        assert_eq!(b.head("one/a/b").expect("head").size, 1);
        assert_eq!(b.head("two/a/b").expect("head").key, "two/a/b");
        let l = b.list("two/a").expect("list");
        assert_eq!(l.iter().map(|m| m.key.as_str()).collect::<Vec<_>>(), ["two/a/b"]);
        assert!(matches!(b.get("three/x"), Err(StoreError::NotFound(_))));
        assert_eq!(b.delete("one"), Err(BucketError::NotEmpty));
        ObjectStore::delete(&b, "one/a/b").expect("delete object");
        b.delete("one").expect("delete bucket");
        assert!(!b.exists("one"));
    }
}
