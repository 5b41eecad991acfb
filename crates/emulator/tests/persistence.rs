//! A directory emulator keeps everything across restarts: objects with their
//! ETags, headers and metadata, appends, and multipart uploads in progress
//! (their parts included), which complete after the restart.

use std::path::PathBuf;

use emulator::buckets::{Backing, Buckets};
use emulator::objects::{Attrs, Precondition, md5_etag};
use objstore::Bytes;

fn temp_dir() -> PathBuf {
    let p = std::env::temp_dir().join(format!("milliscale-emu-persist-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    p
}

#[test]
fn objects_metadata_and_uploads_survive_a_restart() {
    let dir = temp_dir();
    let attrs = Attrs {
        content_type: Some("text/plain".into()),
        metadata: [("color".to_owned(), "blue".to_owned())].into(),
        ..Default::default()
    };
    let (upload, part_etag) = {
        let b = Buckets::open(Backing::Dir(dir.clone()), 10_000).expect("open");
        b.create("keep").expect("create");
        let o = b
            .put_object(
                "keep",
                "doc",
                Bytes::from_static(b"hello"),
                Precondition::None,
                attrs.clone(),
            )
            .expect("put");
        assert_eq!(o.etag, md5_etag(b"hello"));
        b.append_object("keep", "log", 0, Bytes::from_static(b"a"), Precondition::None)
            .expect("append");
        b.append_object("keep", "log", 1, Bytes::from_static(b"b"), Precondition::None)
            .expect("append");
        let id = b.create_upload("keep", "big", attrs.clone()).expect("upload");
        let e = b.upload_part(&id, "keep", "big", 1, Bytes::from_static(b"part")).expect("part");
        (id, e)
        // Dropped: the "process" ends.
    };
    let b = Buckets::open(Backing::Dir(dir.clone()), 10_000).expect("reopen");
    assert!(b.exists("keep"));
    let doc = b.head_object("keep", "doc").expect("doc");
    assert_eq!((doc.etag.as_str(), &doc.attrs), (md5_etag(b"hello").as_str(), &attrs));
    let log = b.head_object("keep", "log").expect("log");
    assert_eq!((log.size, log.parts), (2, Some(2)));
    let ups = b.list_uploads("keep").expect("uploads");
    assert_eq!(ups.iter().map(|u| u.id.as_str()).collect::<Vec<_>>(), [upload.as_str()]);
    let (_, parts) = b.list_parts(&upload, "keep", "big").expect("parts");
    assert_eq!(parts.iter().map(|p| p.etag.as_str()).collect::<Vec<_>>(), [part_etag.as_str()]);
    let big = b
        .complete_upload(&upload, "keep", "big", &[(1, part_etag)], Precondition::None)
        .expect("complete after the restart");
    assert!(big.etag.ends_with("-1\""), "{}", big.etag);
    assert_eq!(b.head_object("keep", "big").expect("big").attrs, attrs);
    let _ = std::fs::remove_dir_all(&dir);
}
