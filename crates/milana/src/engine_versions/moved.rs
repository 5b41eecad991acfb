//! A range's rows changing hands (design record 0009), in the engine's
//! layout: a row copied from the range's old owner held as its key's only
//! version ([`Versions::adopt`]), and a range's rows deleted once it moved
//! away ([`Versions::drop_range`]). Written as installs are: staged for
//! the caller's engine transaction, or in one of their own.

use milliscale::Direction;

use super::{EngineVersions, RowWrite, lock, parse, split};
use crate::types::{CommitTs, Value, cluster_key};
use crate::versions::{in_range, row_value};

impl EngineVersions {
    pub(super) fn adopt_row(&mut self, key: &[u8], version: CommitTs, value: Option<Value>) {
        let (name, k) = split(key);
        let table = self.table_for_write(name);
        if let Some(old) = self.row_before(&table, key, k)
            && parse(&old).0 >= version
        {
            return;
        }
        // Older versions are not copied: a read below this one is told
        // its snapshot is gone, as after a restart.
        let mut past = key.to_vec();
        past.push(0);
        lock(&self.history).forget_range(key, &past);
        self.remember(key, version);
        let row = row_value(version, value.as_deref());
        self.write(vec![RowWrite { table, key: k.to_vec(), row, changed: None, hint: None }]);
    }

    pub(super) fn drop_rows(&mut self, start: &[u8], end: &[u8]) -> usize {
        let mut gone = self.forget_range(start, end);
        let mut deletes = Vec::new();
        let mut tx = self.db.begin().expect("begin a read");
        for (table, lo, hi) in self.ranges(start, end) {
            let (lo, hi) = (lo.as_ref().map(Vec::as_slice), hi.as_ref().map(Vec::as_slice));
            for row in tx.range(&table, lo, hi, Direction::Forward) {
                let (k, _) = row.expect("read a range's rows");
                deletes.push(RowWrite {
                    table: table.clone(),
                    key: k,
                    row: Vec::new(),
                    changed: None,
                    hint: None,
                });
            }
        }
        tx.abort();
        // Staged writes in the range not yet applied go too.
        let staged = self.staged.iter().filter(|w| {
            let key = cluster_key(w.table.name(), &w.key);
            in_range(&key, start, end) && !w.row.is_empty()
        });
        let staged: Vec<RowWrite> = staged
            .map(|w| RowWrite {
                table: w.table.clone(),
                key: w.key.clone(),
                row: Vec::new(),
                changed: None,
                hint: None,
            })
            .collect();
        gone += deletes.len();
        deletes.extend(staged);
        self.write(deletes);
        gone
    }

    /// Write `rows`: staged, or in an engine transaction of their own.
    pub(super) fn write(&mut self, rows: Vec<RowWrite>) {
        self.offered.clear();
        if self.staging {
            self.staged.extend(rows);
            return;
        }
        let mut tx = self.db.begin().expect("begin a write");
        for w in &rows {
            w.apply(&mut tx).expect("write a version");
        }
        let _pre_committed = tx.precommit().expect("commit a write");
    }
}
