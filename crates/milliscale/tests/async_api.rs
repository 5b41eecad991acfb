//! The async API inside tokio, and the blocking API called from async
//! code, against `s3://` on the emulator (HTTP on loopback):
//! - `AsyncDatabase` in a multi-threaded and in a current-thread runtime:
//!   transactions moved into spawned tasks, commits awaited, a restart
//!   that finds every awaited commit;
//! - the blocking `Database` opened, used and dropped inside a runtime: it
//!   works, it does not panic;
//! - an awaited ack stays pending while its part cannot land, resolves
//!   when it does, and fails when the log is poisoned;
//! - `AsyncReplica` waits for a token without blocking its runtime.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::Gate;
use emulator::{Emulator, EmulatorOptions};
use milliscale::store::{MemoryStore, ObjectStore};
use milliscale::{AsyncDatabase, AsyncReplica, Database, Error, Options};
use objstore::sim::{Faults, SimStore};

fn emulator() -> Emulator {
    Emulator::start(EmulatorOptions::default()).expect("emulator")
}

/// A fresh bucket's URL, with the emulator's credentials.
fn s3_options(emu: &Emulator, bucket: &str) -> Options {
    emu.bucket(bucket).expect("create the bucket");
    let (key, secret) = (emulator::DEFAULT_ACCESS_KEY, emulator::DEFAULT_SECRET_KEY);
    let creds = milliscale::store::S3Credentials::new(key, secret);
    Options::new().add_s3_store(emu.bucket_url(bucket), creds)
}

const TASKS: u64 = 40;
const PER_TASK: u64 = 5;

/// Tasks, each with transactions of its own moved into it, commit and
/// await durability; then close, reopen, and find every commit.
async fn tasks_commit_and_survive_a_restart(options: Options) {
    let db = AsyncDatabase::open(options.clone()).await.expect("open");
    let t = db.create_table("t").await.expect("table");
    let mut handles = Vec::new();
    for task in 0..TASKS {
        let (db, t) = (db.clone(), t.clone());
        // The transaction begins here and moves into the task.
        let mut tx = db.begin().expect("begin");
        tx.put(&t, format!("first-{task}").as_bytes(), b"moved").expect("put");
        handles.push(tokio::spawn(async move {
            tx.commit().await.expect("the moved transaction commits");
            for i in 0..PER_TASK {
                let mut tx = db.begin().expect("begin");
                tx.put(&t, format!("k-{task}-{i}").as_bytes(), &i.to_le_bytes()).expect("put");
                // Held across an await point: the transaction is Send.
                tokio::task::yield_now().await;
                let info = tx.commit().await.expect("commit");
                assert!(info.csn.is_some());
            }
        }));
    }
    for h in handles {
        h.await.expect("task");
    }
    let csn = db.put(&t, b"single", b"write").await.expect("a single-key write");
    assert!(db.durable_csn() > csn, "a resolved put is durable");
    db.close().await.expect("close");

    let db = AsyncDatabase::open(options).await.expect("reopen");
    let t = db.open_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    for task in 0..TASKS {
        assert!(tx.get(&t, format!("first-{task}").as_bytes()).expect("get").is_some());
        for i in 0..PER_TASK {
            let v = tx.get(&t, format!("k-{task}-{i}").as_bytes()).expect("get");
            assert_eq!(v, Some(i.to_le_bytes().to_vec()), "task {task} commit {i}");
        }
    }
    assert_eq!(db.get(&t, b"single").expect("get"), Some(b"write".to_vec()));
    drop(tx);
    db.close().await.expect("close");
}

#[test]
fn async_api_in_a_multi_threaded_runtime() {
    let emu = emulator();
    let options = s3_options(&emu, "async-multi");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(tasks_commit_and_survive_a_restart(options));
}

#[test]
fn async_api_in_a_current_thread_runtime() {
    let emu = emulator();
    let options = s3_options(&emu, "async-current");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(tasks_commit_and_survive_a_restart(options));
}

/// What a service does by mistake: the blocking API inside async code.
/// It works (store calls leave the runtime's thread), and dropping the
/// database there does not panic.
async fn blocking_api_inside(options: Options) {
    let db = Database::open(options.clone()).expect("open inside a runtime");
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"k", b"v").expect("put");
    tx.commit_and_wait().expect("commit");
    drop(db); // closes: the final flush and the store's runtime, inside ours
    let db = Database::open(options).expect("reopen inside a runtime");
    let t = db.open_table("t").expect("table");
    assert_eq!(db.get(&t, b"k").expect("get"), Some(b"v".to_vec()));
    db.close().expect("close");
}

#[test]
fn blocking_api_inside_a_multi_threaded_runtime_works() {
    let emu = emulator();
    let options = s3_options(&emu, "blocking-multi");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async { tokio::spawn(blocking_api_inside(options)).await.expect("task") });
}

#[test]
fn blocking_api_inside_a_current_thread_runtime_works() {
    let emu = emulator();
    let options = s3_options(&emu, "blocking-current");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(blocking_api_inside(options));
}

#[test]
fn an_awaited_ack_waits_for_its_part_and_fails_when_poisoned() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let gate = Gate::new(Arc::new(MemoryStore::new()));
    let store: Arc<dyn ObjectStore> = gate.clone();
    rt.block_on(async {
        let db = AsyncDatabase::open(Options::new().add_store_handle(store)).await.expect("open");
        let _open = gate.open_on_drop();
        let t = db.create_table("t").await.expect("table");
        gate.close(0);
        let mut tx = db.begin().expect("begin");
        tx.put(&t, b"k", b"v").expect("put");
        let ack = tx.precommit().expect("pre-commit");
        let mut durable = std::pin::pin!(ack.durable());
        let early = tokio::time::timeout(Duration::from_millis(300), &mut durable).await;
        assert!(early.is_err(), "acknowledged while its part was held back");
        gate.open_all();
        let info = tokio::time::timeout(Duration::from_secs(10), durable)
            .await
            .expect("acknowledged once the part landed")
            .expect("durable");
        assert!(info.csn.is_some());
        db.close().await.expect("close");
    });

    let sim = Arc::new(
        SimStore::new(Arc::new(MemoryStore::new()), "io2", Faults::default()).expect("sim"),
    );
    rt.block_on(async {
        let options = Options::new()
            .add_store_handle(sim.clone())
            .flush_timeout(Duration::from_millis(1))
            .store_deadline(Duration::from_millis(200));
        let db = AsyncDatabase::open(options).await.expect("open");
        let t = db.create_table("t").await.expect("table");
        sim.set_unavailable_for(Duration::from_secs(3600));
        let mut tx = db.begin().expect("begin");
        tx.put(&t, b"k", b"v").expect("put");
        let r = tokio::time::timeout(Duration::from_secs(10), tx.commit()).await;
        assert!(matches!(r, Ok(Err(Error::StoreUnavailable(_)))), "{r:?}");
        let closed = db.close().await;
        assert!(matches!(closed, Err(Error::StoreUnavailable(_))), "close reports it: {closed:?}");
    });
}

#[test]
fn an_async_replica_waits_for_a_token() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    rt.block_on(async {
        let options = Options::new().add_store_handle(store);
        let db = AsyncDatabase::open(options.clone()).await.expect("open");
        let t = db.create_table("t").await.expect("table");
        db.put(&t, b"before", b"1").await.expect("put");
        let replica = AsyncReplica::open(options).await.expect("replica");
        // A token the writer has not reached yet: the wait is pending, and
        // the runtime's one thread goes on (the writer's task below runs).
        let writer = {
            let (db, t) = (db.clone(), t.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                db.put(&t, b"after", b"2").await.expect("put")
            })
        };
        let token = writer.await.expect("writer");
        let mut tx = tokio::time::timeout(Duration::from_secs(10), replica.begin_at(token))
            .await
            .expect("the replica applied the token in time")
            .expect("begin at the token");
        let t = replica.open_table("t").expect("table");
        assert_eq!(tx.get(&t, b"after").expect("get"), Some(b"2".to_vec()));
        assert_eq!(tx.get(&t, b"before").expect("get"), Some(b"1".to_vec()));
        db.close().await.expect("close");
    });
}
