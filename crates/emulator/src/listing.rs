//! Listing: one walk over a bucket's keys serves ListObjects (v1),
//! ListObjectsV2 and ListObjectVersions, the way S3 pages them.
//!
//! Keys after the marker, under the prefix, are taken in order; with a
//! delimiter, the keys that share the part up to the next delimiter after
//! the prefix roll up into one common prefix, which counts once against
//! `max-keys`. A page ends after `max-keys` entries; the last entry (a key
//! or a common prefix) is where the next page starts.

use crate::objects::Object;

/// Most entries in one page (S3's limit and default).
pub const LIST_KEYS_MAX: usize = 1000;

/// One page of a listing.
#[derive(Debug, Default)]
pub struct Page {
    /// Objects on this page.
    pub contents: Vec<Object>,
    /// Common prefixes on this page.
    pub prefixes: Vec<String>,
    /// Whether more entries follow.
    pub truncated: bool,
    /// The last entry on the page (the next page starts after it).
    pub last: Option<String>,
}

/// Walk `objects` (every object under `prefix`, in key order).
pub fn walk(
    objects: Vec<Object>,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max_keys: usize,
) -> Page {
    let mut page = Page::default();
    if max_keys == 0 {
        // S3 answers `max-keys=0` with nothing, not truncated.
        return page;
    }
    for o in objects {
        if !o.key.starts_with(prefix) || after.is_some_and(|a| o.key.as_str() <= a) {
            continue;
        }
        let common = delimiter.and_then(|d| {
            o.key[prefix.len()..].find(d).map(|i| o.key[..prefix.len() + i + d.len()].to_owned())
        });
        // A common prefix already on this page, or at or before the marker
        // (its keys sort after it, so the marker alone does not skip them).
        if let Some(cp) = &common
            && (page.prefixes.last() == Some(cp) || after.is_some_and(|a| cp.as_str() <= a))
        {
            continue;
        }
        if page.contents.len() + page.prefixes.len() == max_keys {
            page.truncated = true;
            break;
        }
        match common {
            Some(cp) => {
                page.last = Some(cp.clone());
                page.prefixes.push(cp);
            }
            None => {
                page.last = Some(o.key.clone());
                page.contents.push(o);
            }
        }
    }
    page
}

/// `max-keys` as given (`None`: the default), checked and capped.
pub fn max_keys(n: Option<i32>) -> Result<usize, String> {
    match n {
        None => Ok(LIST_KEYS_MAX),
        Some(n) if n < 0 => Err("max-keys must be >= 0".into()),
        Some(n) => Ok((n as usize).min(LIST_KEYS_MAX)),
    }
}

/// Percent-encode as `encoding-type=url` asks: everything but unreserved
/// characters and `/`.
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Hex, for opaque continuation tokens.
pub fn hex_token(s: &str) -> String {
    hex::encode(s.as_bytes())
}

/// The key a continuation token stands for.
pub fn unhex_token(s: &str) -> Option<String> {
    String::from_utf8(hex::decode(s).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::objects::Attrs;

    fn objs(keys: &[&str]) -> Vec<Object> {
        keys.iter()
            .map(|k| Object {
                key: (*k).into(),
                size: 0,
                etag: "\"e\"".into(),
                modified: UNIX_EPOCH,
                attrs: Attrs::default(),
                part_sizes: Vec::new(),
                parts: Some(1),
            })
            .collect()
    }

    fn keys(p: &Page) -> Vec<&str> {
        p.contents.iter().map(|o| o.key.as_str()).collect()
    }

    #[test]
    fn pages_roll_up_common_prefixes_and_resume_after_them() {
        let all = ["a", "b/1", "b/2", "c/x/1", "d"];
        let p = walk(objs(&all), "", Some("/"), None, 2);
        assert_eq!(
            (keys(&p), &p.prefixes[..], p.truncated),
            (vec!["a"], &["b/".to_owned()][..], true)
        );
        let p = walk(objs(&all), "", Some("/"), p.last.as_deref(), 2);
        assert_eq!(keys(&p), ["d"]);
        assert_eq!(p.prefixes, ["c/"]);
        assert!(!p.truncated);
        // A marker inside a common prefix does not list it again.
        let p = walk(objs(&all), "", Some("/"), Some("b/1"), 10);
        assert_eq!((keys(&p), &p.prefixes[..]), (vec!["d"], &["c/".to_owned()][..]));
        // Under a prefix, the delimiter applies after it.
        let p = walk(objs(&all), "c/", Some("/"), None, 10);
        assert_eq!(p.prefixes, ["c/x/"]);
        // No delimiter: plain keys.
        let p = walk(objs(&all), "b", None, None, 10);
        assert_eq!(keys(&p), ["b/1", "b/2"]);
        // max-keys 0: nothing, and not truncated.
        let p = walk(objs(&all), "", None, None, 0);
        assert!(p.contents.is_empty() && !p.truncated);
    }

    #[test]
    fn encodings() {
        assert_eq!(url_encode("a b/c+d%"), "a%20b/c%2Bd%25");
        assert_eq!(url_encode("ü"), "%C3%BC");
        for k in ["", "a/b", "ünï"] {
            assert_eq!(unhex_token(&hex_token(k)).as_deref(), Some(k));
        }
        assert_eq!(unhex_token("zz"), None);
        assert_eq!(max_keys(Some(5000)), Ok(1000));
        assert!(max_keys(Some(-1)).is_err());
    }
}
