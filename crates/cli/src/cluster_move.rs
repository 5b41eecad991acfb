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

use clap::Args;
use milliscale_client::handover::{self, MovePlan};
use milliscale_client::{Client, proto};
use milliscale_milana::shard_map::{MapStore, ShardMap};
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

fn plan(map: ShardMap, a: &MoveArgs) -> Result<MovePlan, Failure> {
    let (i, _, _) = range_at(&map, &a.range)?;
    let mut p = MovePlan::new(map, i, a.to).map_err(Failure::Usage)?;
    p.page_rows = a.page_rows;
    Ok(p)
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

async fn moving(maps: &MapStore, p: &MovePlan, a: &MoveArgs) -> Result<(), Failure> {
    let src = connect(&p.map, p.from, a.token.as_ref()).await?;
    let dst = connect(&p.map, p.to, a.token.as_ref()).await?;
    let publish = async |next: ShardMap| maps.publish(&next);
    let moved = handover::move_range(p, &src, &dst, publish, |s| eprintln!("{s}")).await?;
    let deleted = moved.deleted.map_or("its".to_owned(), |n| n.to_string());
    let again = moved.changed.map_or("every row".to_owned(), |n| format!("{n} keys"));
    println!(
        "moved range {} ({} rows) from shard {} to shard {}: map version {}, frozen {:.0} ms \
         ({again} copied again), {deleted} rows deleted on shard {}",
        a.range,
        moved.rows,
        p.from,
        p.to,
        moved.map_version,
        moved.frozen.as_secs_f64() * 1e3,
        p.from
    );
    Ok(())
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
