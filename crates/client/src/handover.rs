//! Moving a range between two shards (design record 0009): the calls a
//! mover makes (freeze the range on its owner, copy its rows, release it
//! there once the map gives it away), and the mover itself,
//! [`move_range`], which `milliscale cluster move` and the rebalancer run.

use std::time::{Duration, Instant};

use milliscale_milana::shard_map::{MapError, ShardMap};
use milliscale_milana::types::{Key, ShardId};

use crate::{Client, Error, Result, proto};

impl Client {
    /// `ShardFreeze`: freeze (or, with `unfreeze`, lift the freeze of) a
    /// range on this shard; the latest read it served there, and the
    /// keys written since a copy before the freeze began.
    pub async fn shard_freeze(
        &self,
        r: proto::ShardFreezeRequest,
    ) -> Result<proto::ShardFreezeResponse> {
        Ok(self.stub().shard_freeze(self.req(r)).await?.into_inner())
    }

    /// `ShardExport`: a page of a range's rows (frozen, or the copy
    /// before its freeze), or the rows of some of its keys.
    pub async fn shard_export(
        &self,
        r: proto::ShardExportRequest,
    ) -> Result<proto::ShardExportResponse> {
        Ok(self.stub().shard_export(self.req(r)).await?.into_inner())
    }

    /// `ShardImport`: rows of a range moving to this shard.
    pub async fn shard_import(&self, r: proto::ShardImportRequest) -> Result<()> {
        self.stub().shard_import(self.req(r)).await?;
        Ok(())
    }

    /// `ShardRelease`: the rows of a range given away deleted here; how
    /// many.
    pub async fn shard_release(&self, r: proto::ShardReleaseRequest) -> Result<u64> {
        Ok(self.stub().shard_release(self.req(r)).await?.into_inner().deleted)
    }

    /// `ShardInfo`: how the shard is, and with `loads`, the rows of each
    /// range it owns (for the rebalancer).
    pub async fn shard_info(&self, r: proto::ShardInfoRequest) -> Result<proto::ShardInfoResponse> {
        Ok(self.stub().shard_info(self.req(r)).await?.into_inner())
    }

    /// The version of the shard map this shard serves under; it reads
    /// the map's store first if its copy is older than `at_least` (and
    /// was read over 50 ms ago) or over half a second old.
    pub async fn shard_map_version(&self, at_least: u64) -> Result<u64> {
        let r = self.stub().shard_map(self.req(proto::ShardMapRequest { at_least })).await?;
        Ok(r.into_inner().version)
    }
}

/// One move: the range at `index` of `map`'s ranges, `[start, end)` (an
/// empty `end`: no end), from its owner `from` to `to`.
#[derive(Debug, Clone)]
pub struct MovePlan {
    /// The map the move starts from; it publishes the version after it.
    pub map: ShardMap,
    /// The range's index in the map's ranges.
    pub index: usize,
    /// The range's first key (a cluster key).
    pub start: Key,
    /// The next range's first key (empty: the range has no end).
    pub end: Key,
    /// Its owner.
    pub from: ShardId,
    /// Where it goes.
    pub to: ShardId,
    /// Rows per page copied.
    pub page_rows: u32,
}

impl MovePlan {
    /// The move of `map`'s range at `index` to `to`; refused (as a
    /// message) for a range already there or a shard the map lacks.
    pub fn new(map: ShardMap, index: usize, to: ShardId) -> std::result::Result<MovePlan, String> {
        let (start, from) = map.ranges.get(index).cloned().ok_or("no such range")?;
        let end = map.ranges.get(index + 1).map(|(k, _)| k.clone()).unwrap_or_default();
        if from == to {
            return Err(format!("the range is on shard {from} already"));
        }
        if !map.shards.contains_key(&to) {
            return Err(format!("map version {} has no shard {to}", map.version));
        }
        Ok(MovePlan { map, index, start, end, from, to, page_rows: 1000 })
    }
}

/// What a move did.
#[derive(Debug, Clone)]
pub struct Moved {
    /// The map version that gave the range to its new owner.
    pub map_version: u64,
    /// Rows copied while the range was served.
    pub rows: u64,
    /// Keys copied again once it was frozen: those written since the
    /// copy began (`None`: the old owner no longer knew them, after a
    /// restart, so every row was copied again).
    pub changed: Option<u64>,
    /// From the freeze until the map was published.
    pub frozen: Duration,
    /// Rows the old owner deleted (`None`: it released the range itself,
    /// once it read the map).
    pub deleted: Option<u64>,
}

/// Move a range as design record 0009's mover: copy its rows from its
/// owner (`src`) to the new owner (`dst`) while `src` still serves it
/// (`src` records the keys written there from the first page on), freeze
/// it on `src`, copy again the keys written since (the last page with
/// the latest read `src` served there, the range's read floor at `dst`),
/// `publish` the next map version giving it to `dst` (the move's commit
/// point: it happened if and only if that version is the one published),
/// then have `src` release it. `said` is told each step. On a failure
/// before publishing, the move is given up (`src` lifts its freeze once
/// the version on the store does not give the range away); a failure to
/// publish leaves it frozen, to be run again or given up by `src` after
/// its move timeout.
pub async fn move_range(
    plan: &MovePlan,
    src: &Client,
    dst: &Client,
    publish: impl AsyncFnOnce(ShardMap) -> std::result::Result<(), MapError>,
    said: impl Fn(String),
) -> std::result::Result<Moved, String> {
    let version = plan.map.version + 1;
    let freeze = |unfreeze| proto::ShardFreezeRequest {
        start: plan.start.clone().into(),
        end: plan.end.clone().into(),
        to: plan.to,
        map_version: version,
        unfreeze,
    };
    let copying = Instant::now();
    let rows = copy(plan, src, dst, None).await?;
    said(format!(
        "copied {rows} rows to shard {} in {:.0} ms while shard {} served them",
        plan.to,
        copying.elapsed().as_secs_f64() * 1e3,
        plan.from
    ));
    let started = Instant::now();
    let answer = match src.shard_freeze(freeze(false)).await {
        Ok(answer) => answer,
        Err(e) => {
            // Frozen perhaps, not published: give it up.
            let _ = src.shard_freeze(freeze(true)).await;
            return Err(format!("freezing the range: {e}"));
        }
    };
    let floor = answer.floor;
    let changed = answer.tracked.then_some(answer.changed.len() as u64);
    said(format!(
        "frozen on shard {} for map version {version} (latest read {floor}); {}",
        plan.from,
        match changed {
            Some(n) => format!("{n} keys written since the copy began"),
            None => "the keys written since the copy are not known: copying every row again".into(),
        }
    ));
    let again = match answer.tracked {
        true => copy_keys(plan, src, dst, answer.changed, floor).await,
        false => copy(plan, src, dst, Some(floor)).await,
    };
    if let Err(e) = again {
        let _ = src.shard_freeze(freeze(true)).await;
        return Err(e);
    }
    let mut next = plan.map.clone();
    next.version = version;
    next.ranges[plan.index].1 = plan.to;
    match publish(next).await {
        Ok(()) => {}
        Err(MapError::Lost(_)) => {
            // Given up: the old owner lifts its freeze once the version
            // on the store does not give the range away (or releases it
            // if it does: a publish taken for lost that landed).
            src.shard_freeze(freeze(true)).await.map_err(|e| format!("giving the move up: {e}"))?;
            return Err(format!(
                "another change published map version {version} first: the range stays on \
                 shard {}; move it again",
                plan.from
            ));
        }
        Err(e) => {
            return Err(format!(
                "publishing map version {version}: {e}; the range stays frozen on shard {} \
                 until the move is run again, or until the shard gives it up after its move \
                 timeout",
                plan.from
            ));
        }
    }
    let frozen = started.elapsed();
    // The new owner and the old read the map again; then the old lets go.
    let t = Instant::now();
    while dst.shard_map_version(version).await.unwrap_or(0) < version {
        if t.elapsed() > Duration::from_secs(10) {
            return Err(format!("shard {} did not read map version {version}", plan.to));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let release = proto::ShardReleaseRequest {
        start: plan.start.clone().into(),
        end: plan.end.clone().into(),
    };
    let mut tries = 0;
    let deleted = loop {
        match src.shard_release(release.clone()).await {
            Ok(n) => break Some(n),
            // Released by the old owner itself, once it read the map.
            Err(e) if e.code() == tonic::Code::NotFound => break None,
            Err(e) if tries < 50 => {
                tries += 1;
                if tries == 50 {
                    said(format!("releasing on shard {}: {e}", plan.from));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("releasing on shard {}: {e}", plan.from)),
        }
    };
    Ok(Moved { map_version: version, rows, changed, frozen, deleted })
}

/// Copy the range's rows from `src` to `dst`, a page at a time, the
/// first clearing the range at `dst`: while `src` serves them (`floor`
/// `None`: `src` records the keys written from the first page on), or
/// once frozen there (then the last page carries the read floor). How
/// many rows.
async fn copy(
    plan: &MovePlan,
    src: &Client,
    dst: &Client,
    floor: Option<u64>,
) -> std::result::Result<u64, String> {
    let (mut after, mut first, mut copied) = (Vec::new(), true, 0u64);
    loop {
        let page = src
            .shard_export(proto::ShardExportRequest {
                start: plan.start.clone().into(),
                end: plan.end.clone().into(),
                after: after.clone().into(),
                limit: plan.page_rows,
                keys: Vec::new(),
            })
            .await
            .map_err(|e: Error| format!("copying the range's rows: {e}"))?;
        let last = page.rows.last().map(|r| r.key.to_vec());
        copied += page.rows.len() as u64;
        let import = proto::ShardImportRequest {
            start: plan.start.clone().into(),
            end: plan.end.clone().into(),
            rows: page.rows,
            tables: page.tables,
            first,
            floor: if page.more { 0 } else { floor.unwrap_or(0) },
            deleted: Vec::new(),
            map_version: plan.map.version + 1,
        };
        dst.shard_import(import).await.map_err(|e| format!("writing the range's rows: {e}"))?;
        first = false;
        match (page.more, last) {
            (true, Some(k)) => after = k,
            _ => return Ok(copied),
        }
    }
}

/// Copy the rows of the frozen range's `changed` keys again from `src` to
/// `dst` (deleting there those `src` no longer has), a page of keys at a
/// time; the last page carries the read floor.
async fn copy_keys(
    plan: &MovePlan,
    src: &Client,
    dst: &Client,
    changed: Vec<bytes::Bytes>,
    floor: u64,
) -> std::result::Result<u64, String> {
    let pages: Vec<&[bytes::Bytes]> = match changed.is_empty() {
        true => vec![&[]],
        false => changed.chunks(plan.page_rows.max(1) as usize).collect(),
    };
    let last = pages.len() - 1;
    for (i, keys) in pages.into_iter().enumerate() {
        let page = match keys.is_empty() {
            true => proto::ShardExportResponse::default(),
            false => src
                .shard_export(proto::ShardExportRequest {
                    start: plan.start.clone().into(),
                    end: plan.end.clone().into(),
                    keys: keys.to_vec(),
                    ..Default::default()
                })
                .await
                .map_err(|e: Error| format!("copying the range's changed rows: {e}"))?,
        };
        let import = proto::ShardImportRequest {
            start: plan.start.clone().into(),
            end: plan.end.clone().into(),
            rows: page.rows,
            tables: page.tables,
            first: false,
            floor: if i == last { floor } else { 0 },
            deleted: page.absent,
            map_version: plan.map.version + 1,
        };
        dst.shard_import(import)
            .await
            .map_err(|e| format!("writing the range's changed rows: {e}"))?;
    }
    Ok(changed.len() as u64)
}
