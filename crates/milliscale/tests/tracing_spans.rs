//! The engine's `tracing` spans: `open`, `recovery`, `commit` (with its
//! CSN), `flush` (on the log's own threads, with its outcome) and
//! `checkpoint` are all opened where a subscriber can see them. One test
//! in this binary: it installs a global subscriber that records span
//! names and fields.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use milliscale::{Database, Options};

/// Span name -> how many were opened, and the fields recorded on them.
#[derive(Default)]
struct Seen {
    opened: BTreeMap<&'static str, u64>,
    fields: BTreeMap<(&'static str, String), u64>,
}

struct Recorder {
    next: AtomicU64,
    names: Mutex<BTreeMap<u64, &'static str>>,
    seen: &'static Mutex<Seen>,
}

struct Fields<'a>(&'static str, &'a Mutex<Seen>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, _: &dyn std::fmt::Debug) {
        *self.1.lock().fields.entry((self.0, field.name().to_owned())).or_default() += 1;
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let name = span.metadata().name();
        self.names.lock().insert(id, name);
        *self.seen.lock().opened.entry(name).or_default() += 1;
        span.record(&mut Fields(name, self.seen));
        Id::from_u64(id)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(&name) = self.names.lock().get(&span.into_u64()) {
            values.record(&mut Fields(name, self.seen));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn commit_flush_checkpoint_open_and_recovery_open_spans() {
    let seen: &'static Mutex<Seen> = Box::leak(Box::default());
    let recorder = Recorder { next: AtomicU64::new(0), names: Mutex::default(), seen };
    tracing::subscriber::set_global_default(recorder).expect("the only subscriber");

    let dir = tempfile::tempdir().expect("dir");
    let url = format!("file://{}", dir.path().display());
    let db = Database::open(Options::new().store(&url)).expect("create");
    let t = db.create_table("t").expect("table");
    for i in 0..10u32 {
        db.put(&t, &i.to_be_bytes(), b"v").expect("a durable write");
    }
    db.checkpoint().expect("checkpoint");
    db.close().expect("close");
    let db = Database::open(Options::new().store(&url)).expect("recover");
    db.close().expect("close");

    let seen = seen.lock();
    for span in ["open", "recovery", "checkpoint"] {
        assert!(
            seen.opened.get(span).is_some_and(|&n| n >= 1),
            "no {span} span: {:?}",
            seen.opened
        );
    }
    assert!(seen.opened.get("commit").is_some_and(|&n| n >= 10), "{:?}", seen.opened);
    assert!(seen.opened.get("flush").is_some_and(|&n| n >= 1), "{:?}", seen.opened);
    for (span, field) in [
        ("commit", "csn"),
        ("commit", "dsn"),
        ("flush", "ok"),
        ("flush", "bytes"),
        ("flush", "segment"),
    ] {
        assert!(
            seen.fields.contains_key(&(span, field.to_owned())),
            "{span} never recorded {field}: {:?}",
            seen.fields.keys().collect::<Vec<_>>()
        );
    }
}
