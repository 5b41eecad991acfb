//! TPC-C consistency conditions 1 to 4 (spec §3.3.2), checked in one
//! snapshot.

use milliscale::{Database, Direction, Error, TxnOptions};

use super::Tables;
use super::schema::*;
use super::txns::{Txn, scan_prefix};

/// Check conditions 1-4 over every warehouse and district. Returns the
/// violations found (empty: consistent).
pub fn check(db: &Database, t: &Tables, warehouses: u32) -> Result<Vec<String>, Error> {
    let mut tx = db.begin_with(TxnOptions { read_only: true, ..Default::default() })?;
    check_in(&mut tx, t, warehouses)
}

/// What a run says of the check: the note that conditions 1-4 hold, or
/// the error that names the first violations.
pub fn verdict(violations: &[String], check_s: f64) -> Result<String, String> {
    if violations.is_empty() {
        return Ok(format!("consistency conditions 1-4 hold (checked in {check_s:.2} s)"));
    }
    Err(format!(
        "TPC-C consistency check failed ({} violations): {}",
        violations.len(),
        violations.iter().take(10).cloned().collect::<Vec<_>>().join("; ")
    ))
}

/// [`check`] in transaction `tx`, which should be read-only (one snapshot).
pub fn check_in<X: Txn + ?Sized>(
    tx: &mut X,
    t: &Tables<X::Table>,
    warehouses: u32,
) -> Result<Vec<String>, Error> {
    let mut bad = Vec::new();
    for w in 1..=warehouses {
        let Some(w_row) = tx.get(&t.warehouse, &warehouse::key(w))? else {
            bad.push(format!("warehouse {w} is missing"));
            continue;
        };
        let mut d_ytd_sum = 0i64;
        for d in 1..=10u8 {
            let Some(d_row) = tx.get(&t.district, &district::key(w, d))? else {
                bad.push(format!("district {w}/{d} is missing"));
                continue;
            };
            d_ytd_sum += get_i64(&d_row, district::YTD);
            let next = get_u32(&d_row, district::NEXT_O_ID);
            let dk = district::key(w, d);

            let orders = scan_prefix(tx, &t.order, &dk, Direction::Forward, usize::MAX)?;
            let max_o = orders.last().map(|(k, _)| order::id(k));
            let ol_cnt_sum: u64 =
                orders.iter().map(|(_, v)| u64::from(get_u8(v, order::OL_CNT))).sum();
            let new_orders = scan_prefix(tx, &t.new_order, &dk, Direction::Forward, usize::MAX)?;
            let no_ids: Vec<u32> = new_orders.iter().map(|(k, _)| new_order::order(k)).collect();
            let lines = scan_prefix(tx, &t.order_line, &dk, Direction::Forward, usize::MAX)?;

            // Condition 2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID).
            if max_o != Some(next - 1) {
                bad.push(format!(
                    "condition 2: district {w}/{d}: D_NEXT_O_ID - 1 = {}, max(O_ID) = {max_o:?}",
                    next - 1
                ));
            }
            if let Some(&max_no) = no_ids.last() {
                if max_no != next - 1 {
                    bad.push(format!(
                        "condition 2: district {w}/{d}: D_NEXT_O_ID - 1 = {}, max(NO_O_ID) = {max_no}",
                        next - 1
                    ));
                }
                // Condition 3: max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW-ORDER.
                let span = u64::from(max_no - no_ids[0]) + 1;
                if span != no_ids.len() as u64 {
                    bad.push(format!(
                        "condition 3: district {w}/{d}: new orders {}..={max_no} span {span}, but {} rows",
                        no_ids[0],
                        no_ids.len()
                    ));
                }
            }
            // Condition 4: sum(O_OL_CNT) = rows in ORDER-LINE.
            if ol_cnt_sum != lines.len() as u64 {
                bad.push(format!(
                    "condition 4: district {w}/{d}: sum(O_OL_CNT) = {ol_cnt_sum}, order lines = {}",
                    lines.len()
                ));
            }
        }
        // Condition 1: W_YTD = sum(D_YTD).
        let w_ytd = get_i64(&w_row, warehouse::YTD);
        if w_ytd != d_ytd_sum {
            bad.push(format!(
                "condition 1: warehouse {w}: W_YTD = {w_ytd}, sum(D_YTD) = {d_ytd_sum}"
            ));
        }
    }
    Ok(bad)
}
