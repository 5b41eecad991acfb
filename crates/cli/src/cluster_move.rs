//! `milliscale cluster move`: move a range of the shard map to another
//! shard while clients run, as design record 0009's mover: freeze it on
//! its owner, copy its rows to the new owner (the last page with the
//! latest read the old owner served there, the range's read floor),
//! publish the next map version giving it there (the move's commit
//! point), then release it on the old owner. The range is refused,
//! retryably, from the freeze until the clients have the new map. Run
//! again with the same arguments while the map has not moved, it finishes
//! a move whose mover stopped before publishing; left alone, the old
//! owner gives such a move up after its move timeout, and releases a
//! range whose move was published (`shard/moves.rs` in the server).

use std::time::{Duration, Instant};

use clap::Args;
use milliscale_client::{Client, proto};
use milliscale_milana::shard_map::{MapError, MapStore, ShardMap};
use milliscale_milana::types::cluster_key;

use crate::args::Failure;
use crate::args::MapArgs;

#[derive(Args)]
pub(crate) struct MoveArgs {
    #[command(flatten)]
    map: MapArgs,
    /// The range, by the key it begins at, as `TABLE=KEY` (`TABLE=` for a
    /// range that begins at the table's first key). To move part of a
    /// range, `milliscale cluster split` it first.
    #[arg(long, value_name = "TABLE=KEY")]
    range: String,
    /// The shard it moves to.
    #[arg(long)]
    to: u32,
    /// The bearer token (a writer's) for the shards.
    #[arg(long, env = "MILLISCALE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Rows per page copied.
    #[arg(long, default_value_t = 1000)]
    page_rows: u32,
}

/// The range to move and its shards, from the map.
struct Plan {
    map: ShardMap,
    /// Its index in the map's ranges.
    i: usize,
    start: Vec<u8>,
    end: Vec<u8>,
    from: u32,
}

/// The range of `map` that begins at `range` (`TABLE=KEY`): its index in
/// the map's ranges, and its bounds as cluster keys (`end` empty: no end).
fn range_at(map: &ShardMap, range: &str) -> Result<(usize, Vec<u8>, Vec<u8>), Failure> {
    let (table, key) = range
        .split_once('=')
        .ok_or_else(|| Failure::Usage(format!("--range {range}: expected TABLE=KEY")))?;
    let start = cluster_key(table, key.as_bytes());
    let i = map.ranges.iter().position(|(k, _)| *k == start).ok_or_else(|| {
        Failure::Usage(format!(
            "no range of map version {} begins at {range}; `milliscale cluster split --at \
             {range}` first",
            map.version
        ))
    })?;
    let end = map.ranges.get(i + 1).map(|(k, _)| k.clone()).unwrap_or_default();
    Ok((i, start, end))
}

fn plan(map: ShardMap, a: &MoveArgs) -> Result<Plan, Failure> {
    let (i, start, end) = range_at(&map, &a.range)?;
    let from = map.ranges[i].1;
    if from == a.to {
        return Err(Failure::Usage(format!("the range is on shard {from} already")));
    }
    if !map.shards.contains_key(&a.to) {
        return Err(Failure::Usage(format!("map version {} has no shard {}", map.version, a.to)));
    }
    Ok(Plan { map, i, start, end, from })
}

async fn connect(map: &ShardMap, s: u32, token: Option<&String>) -> Result<Client, Failure> {
    let addr = map.shards[&s].addr.clone();
    let mut b = Client::builder(addr.clone());
    if let Some(t) = token {
        b = b.token(t.clone());
    }
    b.connect().await.map_err(|e| Failure::Run(format!("shard {s} at {addr}: {e}")))
}

fn run(what: &str) -> impl Fn(milliscale_client::Error) -> Failure + '_ {
    move |e| Failure::Run(format!("{what}: {e}"))
}

pub(crate) fn move_range(a: MoveArgs) -> Result<(), Failure> {
    let maps = a.map.open()?;
    let map = maps.latest().map_err(|e| e.to_string())?;
    let map = map.ok_or_else(|| Failure::Run("no shard map published".into()))?;
    let p = plan(map, &a)?;
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(moving(&maps, &p, &a))
}

async fn moving(maps: &MapStore, p: &Plan, a: &MoveArgs) -> Result<(), Failure> {
    let version = p.map.version + 1;
    let (src, dst) = (
        connect(&p.map, p.from, a.token.as_ref()).await?,
        connect(&p.map, a.to, a.token.as_ref()).await?,
    );
    let freeze = |unfreeze| proto::ShardFreezeRequest {
        start: p.start.clone().into(),
        end: p.end.clone().into(),
        to: a.to,
        map_version: version,
        unfreeze,
    };
    let started = Instant::now();
    let floor = match src.shard_freeze(freeze(false)).await {
        Ok(floor) => floor,
        Err(e) => {
            // Frozen perhaps, not published: the range may be served again.
            let _ = src.shard_freeze(freeze(true)).await;
            return Err(run("freezing the range")(e));
        }
    };
    eprintln!("frozen on shard {} for map version {version} (latest read {floor})", p.from);
    let copied = match copy(&src, &dst, p, a.page_rows, floor).await {
        Ok(n) => n,
        Err(e) => {
            // Nothing published: the range may be served again.
            let _ = src.shard_freeze(freeze(true)).await;
            return Err(e);
        }
    };
    let mut next = p.map.clone();
    next.version = version;
    next.ranges[p.i].1 = a.to;
    match maps.publish(&next) {
        Ok(()) => {}
        Err(MapError::Lost(_)) => {
            // Given up: the old owner lifts its freeze once the version
            // on the store does not give the range away (or releases the
            // range if it does: a publish taken for lost that landed).
            src.shard_freeze(freeze(true)).await.map_err(run("giving the move up"))?;
            return Err(Failure::Run(format!(
                "another change published map version {version} first: the range stays on \
                 shard {}; move it again",
                p.from
            )));
        }
        Err(e) => {
            return Err(Failure::Run(format!(
                "publishing map version {version}: {e}; the range stays frozen on shard {} \
                 until the move is run again, or until the shard gives it up after its move \
                 timeout",
                p.from
            )));
        }
    }
    let frozen_for = started.elapsed();
    // The new owner and the old read the map again; then the old lets go.
    let t = Instant::now();
    while dst.shard_map_version(version).await.unwrap_or(0) < version {
        if t.elapsed() > Duration::from_secs(10) {
            return Err(Failure::Run(format!("shard {} did not read map version {version}", a.to)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let release =
        proto::ShardReleaseRequest { start: p.start.clone().into(), end: p.end.clone().into() };
    let mut tries = 0;
    let deleted = loop {
        match src.shard_release(release.clone()).await {
            Ok(n) => break n.to_string(),
            // Released by the old owner itself, once it read the map.
            Err(e) if e.code() == milliscale_client::Code::NotFound => break "its".into(),
            Err(e) if tries < 50 => {
                tries += 1;
                if tries == 50 {
                    eprintln!("releasing on shard {}: {e}", p.from);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(Failure::Run(format!("releasing on shard {}: {e}", p.from))),
        }
    };
    println!(
        "moved range {} ({copied} rows) from shard {} to shard {}: map version {version}, \
         frozen {:.0} ms, {deleted} rows deleted on shard {}",
        a.range,
        p.from,
        a.to,
        frozen_for.as_secs_f64() * 1e3,
        p.from
    );
    Ok(())
}

/// Copy the frozen range's rows from `src` to `dst`, a page at a time;
/// the last page carries the read floor. How many rows.
async fn copy(
    src: &Client,
    dst: &Client,
    p: &Plan,
    page_rows: u32,
    floor: u64,
) -> Result<u64, Failure> {
    let (mut after, mut first, mut copied) = (Vec::new(), true, 0u64);
    loop {
        let page = src
            .shard_export(proto::ShardExportRequest {
                start: p.start.clone().into(),
                end: p.end.clone().into(),
                after: after.clone().into(),
                limit: page_rows,
            })
            .await
            .map_err(run("copying the range's rows"))?;
        let last = page.rows.last().map(|r| r.key.to_vec());
        copied += page.rows.len() as u64;
        let import = proto::ShardImportRequest {
            start: p.start.clone().into(),
            end: p.end.clone().into(),
            rows: page.rows,
            tables: page.tables,
            first,
            floor: if page.more { 0 } else { floor },
        };
        dst.shard_import(import).await.map_err(run("writing the range's rows"))?;
        first = false;
        match (page.more, last) {
            (true, Some(k)) => after = k,
            _ => return Ok(copied),
        }
    }
}

#[derive(Args)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    map: MapArgs,
    /// The range, by the key it begins at, as `TABLE=KEY`.
    #[arg(long, value_name = "TABLE=KEY")]
    range: String,
    /// The shard it moved away from, which still holds it frozen.
    #[arg(long)]
    from: u32,
    /// The bearer token (a writer's) for the shard.
    #[arg(long, env = "MILLISCALE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

/// `cluster release`: the last step of a move whose mover stopped after
/// publishing: the old owner deletes the range's rows and lifts its
/// freeze, once the map gives the range to the shard it moved to.
pub(crate) fn release(a: ReleaseArgs) -> Result<(), Failure> {
    let maps = a.map.open()?;
    let map = maps.latest().map_err(|e| e.to_string())?;
    let map = map.ok_or_else(|| Failure::Run("no shard map published".into()))?;
    let (_, start, end) = range_at(&map, &a.range)?;
    if !map.shards.contains_key(&a.from) {
        return Err(Failure::Usage(format!("map version {} has no shard {}", map.version, a.from)));
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let c = connect(&map, a.from, a.token.as_ref()).await?;
        let r = proto::ShardReleaseRequest { start: start.into(), end: end.into() };
        let deleted = c.shard_release(r).await.map_err(run("releasing the range"))?;
        println!("released range {} on shard {}: {deleted} rows deleted", a.range, a.from);
        Ok(())
    })
}
