//! One-shot batches racing on one shard's keys: a shard reads a batch's
//! rows outside its lock, between the read marks and the prepare; a
//! version installed in between must refuse the batch, or two batches
//! would both overwrite the same value (a lost update).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use milliscale_client::{Batch, Cluster};

use crate::cluster::{TABLE, account, three_shards};

/// Per key: (the value read, the value written) of each committed batch.
type Seen = HashMap<Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>>;

/// 8 tasks, each running batches of "get k, then put k = a new id" on two
/// keys of shard 0 (a00..a03 are its own) until 150 have committed each.
/// The oracle: on each key, every value was read by at most one
/// committed batch, and the committed batches' reads and writes form one
/// chain from the first value to the last (a serial order of them all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_read_modify_write_batches_on_one_shard_lose_no_update() {
    const TASKS: u64 = 8;
    const EACH: u64 = 150;
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let keys = [account(0), account(2)];
    for k in &keys {
        c.put(TABLE, k, b"start").await.expect("the first value");
    }
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (c, seen, keys) = (c.clone(), Arc::clone(&seen), keys.clone());
        tasks.push(tokio::spawn(async move {
            let (mut done, mut refused) = (0u64, 0u64);
            while done < EACH {
                let k = &keys[((t + done + refused) % 2) as usize];
                let id = format!("t{t}-{done}-{refused}").into_bytes();
                let mut b = Batch::new();
                b.get(TABLE, k).put(TABLE, k, &id);
                match c.execute(b.retries(0)).await {
                    Ok(r) => {
                        let read = r.value(0).expect("every key has a value").to_vec();
                        seen.lock().unwrap().entry(k.clone()).or_default().push((read, id));
                        done += 1;
                    }
                    Err(e) if e.is_retryable() => refused += 1,
                    Err(e) => panic!("a batch failed: {e}"),
                }
            }
            refused
        }));
    }
    let mut refused = 0;
    for t in tasks {
        refused += t.await.expect("a task");
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    for k in &keys {
        let pairs = &seen[k];
        let mut next: HashMap<&[u8], &[u8]> = HashMap::new();
        for (read, wrote) in pairs {
            let twice = next.insert(read, wrote);
            assert!(twice.is_none(), "two committed batches read {read:?} of {k:?}: a lost update");
        }
        // From "start", each value leads to the one written after reading
        // it, through every committed batch, to the key's value now.
        let (mut at, mut steps, mut visited) = (&b"start"[..], 0, HashSet::new());
        while let Some(w) = next.get(at) {
            assert!(visited.insert(*w), "a cycle in {k:?}'s chain");
            at = w;
            steps += 1;
        }
        assert_eq!(steps, pairs.len(), "every committed batch of {k:?} is in one chain");
        let now = c.get(TABLE, k).await.expect("read");
        assert_eq!(now.as_deref(), Some(at), "the chain ends at {k:?}'s value");
    }
    eprintln!("{} batches committed, {refused} refused and run again", TASKS * EACH);
}
