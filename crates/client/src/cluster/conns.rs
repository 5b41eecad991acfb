//! The cluster's connections to its shards and its copy of the shard
//! map: a connection is made from the map's address of its shard and kept
//! with the map version it was made from; a newer map is adopted without
//! touching the connections, which are made again on their next use.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use milliscale_milana::shard_map::ShardMap;
use milliscale_milana::types::ShardId;

use super::{Cluster, lock};
use crate::{Client, Error, Result};

impl Cluster {
    /// A connection to shard `s`: the one made before if the map has not
    /// changed since, else a new one to its address in the current map.
    /// The connections' lock and the map's are never held together (this
    /// once held the first while it read the map, and a refresh held the
    /// map for writing while it cleared the connections: the two could
    /// deadlock, as the server's shards did with their peers).
    pub(super) fn shard(&self, s: ShardId) -> Result<Client> {
        let version = self.inner.map_version.load(Ordering::Acquire);
        if let Some((v, c)) = lock(&self.inner.conns).get(&s)
            && *v == version
        {
            return Ok(c.clone());
        }
        let map = self.map();
        let info = map.shards.get(&s).ok_or_else(|| {
            Error::local(format!("the map (version {}) has no shard {s}", map.version))
        })?;
        let c = self.inner.builder.client.clone().with_addr(info.addr.clone()).connect_lazy()?;
        lock(&self.inner.conns).insert(s, (map.version, c.clone()));
        Ok(c)
    }

    /// Use map `m` if it is newer than the one in use.
    pub(super) fn adopt_map(&self, m: ShardMap) {
        let mut map = self.inner.map.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.version > map.version {
            self.inner.map_version.store(m.version, Ordering::Release);
            *map = Arc::new(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::time::{Duration, Instant};

    use milliscale_milana::shard_map::ShardInfo;

    use super::*;

    /// A client that connects to its shards while it adopts newer maps
    /// goes on doing both: `shard` and `adopt_map` never wait for one of
    /// the two locks while holding the other. (With the connections'
    /// lock held across the map's read, and taken under the map's write
    /// lock to clear them, this deadlocked: the server's shards did, in a
    /// test.) The watchdog is this thread; on a deadlock the runtime is
    /// leaked and the test fails.
    #[test]
    fn connections_and_map_changes_never_wait_for_each_other() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let _rt = rt.enter();
        let info = |port| ShardInfo { addr: format!("127.0.0.1:{port}"), log: String::new() };
        let mut map = ShardMap {
            version: 1,
            ranges: vec![(Vec::new(), 0)],
            shards: [(0, info(1)), (1, info(2))].into_iter().collect(),
            rebalance: None,
            split_load: None,
        };
        let builder = Cluster::builder("127.0.0.1:1");
        let first = builder.client.clone().connect_lazy().expect("a lazy connection");
        let cluster = builder.assemble(first, map.clone());

        let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let mut threads = Vec::new();
        for t in 0..3u32 {
            let (c, stop, done, rt) =
                (cluster.clone(), Arc::clone(&stop), Arc::clone(&done), rt.handle().clone());
            threads.push(std::thread::spawn(move || {
                let _rt = rt.enter(); // a lazy channel spawns its task
                while !stop.load(Ordering::Relaxed) {
                    c.shard(t % 2).expect("a connection");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let (c, stop2, done2) = (cluster.clone(), Arc::clone(&stop), Arc::clone(&done));
        threads.push(std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                map.version += 1;
                c.adopt_map(map.clone());
                done2.fetch_add(1, Ordering::Relaxed);
            }
        }));
        let started = Instant::now();
        let (mut seen, mut moved) = (0, Instant::now());
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = done.load(Ordering::Relaxed);
            let progressed = now != seen;
            if progressed {
                (seen, moved) = (now, Instant::now());
            }
            if moved.elapsed() > Duration::from_secs(3) {
                std::mem::forget(rt);
                panic!("shard and adopt_map deadlocked");
            }
            if started.elapsed() > Duration::from_secs(2) && progressed {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().expect("a thread");
        }
        assert!(cluster.map().version > 1000, "the map was adopted again and again");
        let (version, _) = lock(&cluster.inner.conns)[&1].clone();
        assert!(version > 1, "a connection made again under a newer map");
    }
}
