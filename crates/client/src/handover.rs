//! The calls a mover makes to move a range between two shards (design
//! record 0009): freeze it on its owner, copy its rows, and release it
//! there once the map gives it away. `milliscale cluster move` runs them.

use crate::{Client, Result, proto};

impl Client {
    /// `ShardFreeze`: freeze (or, with `unfreeze`, lift the freeze of) a
    /// range on this shard; the latest read it served there.
    pub async fn shard_freeze(&self, r: proto::ShardFreezeRequest) -> Result<u64> {
        Ok(self.stub().shard_freeze(self.req(r)).await?.into_inner().floor)
    }

    /// `ShardExport`: a page of a frozen range's rows.
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

    /// The version of the shard map this shard serves under; it reads
    /// the map's store first if its copy is older than `at_least` (and
    /// was read over 50 ms ago) or over half a second old.
    pub async fn shard_map_version(&self, at_least: u64) -> Result<u64> {
        let r = self.stub().shard_map(self.req(proto::ShardMapRequest { at_least })).await?;
        Ok(r.into_inner().version)
    }
}
