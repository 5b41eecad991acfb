//! A shard's hot standby seen from the cluster: it checks on its shard
//! and `Cluster::status` shows how far it trails.

use std::time::Duration;

use milliscale::Options;
use milliscale_client::Cluster;
use milliscale_server::shard::ShardOptions;
use milliscale_server::shard::standby::{Watch, stand_by};

use crate::cluster::{TABLE, account, free_addr, three_shards};

/// A hot standby checks on its shard every 100 ms and says how far it has
/// applied the shard's log; `Cluster::status` shows it, with how far it
/// trails and when it last checked. A standby that stops checking shows
/// its last check ageing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_checks_in_and_status_shows_how_far_it_trails() {
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let standbys = |s: &[milliscale_client::ShardStatus], i: usize| {
        s[i].info.as_ref().expect("shard answered").standbys.clone()
    };
    let none = c.status().await;
    assert!(standbys(&none, 0).is_empty(), "no standby yet");
    assert!(none[0].to_string().contains("no standby has checked in"), "{}", none[0]);

    let listen = free_addr();
    let opts = ShardOptions::new(0, f.map_url.clone());
    let data = Options::new().store(&f.data[0]);
    let watching =
        tokio::spawn(async move { stand_by(&opts, data, listen, Watch::default()).await });
    // Writes on shard 0 while the standby follows them.
    for i in 0..4 {
        let mut tx = c.begin();
        tx.put(TABLE, &account(i), b"1").expect("put");
        tx.commit().await.expect("commit");
    }
    let caught_up = async {
        loop {
            let s = c.status().await;
            let h = standbys(&s, 0);
            if h.len() == 1 && h[0].behind == 0 {
                return (h[0].clone(), s[0].to_string());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (h, shown) = tokio::time::timeout(Duration::from_secs(20), caught_up)
        .await
        .expect("the standby checks in");
    assert_eq!(h.addr, listen.to_string());
    assert!(h.applied_token > 0 && h.last_seen_ms < 1000, "{h:?}");
    assert!(shown.contains(&format!("standby at {listen}: 0 behind")), "{shown}");
    assert!(standbys(&c.status().await, 1).is_empty(), "shard 1 has none");

    watching.abort();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let h = standbys(&c.status().await, 0);
    assert_eq!(h.len(), 1, "still listed: {h:?}");
    assert!(h[0].last_seen_ms >= 500, "its last check ages: {h:?}");
}
