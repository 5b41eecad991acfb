//! The nine TPC-C tables (spec §1.3) and two secondary indexes, as
//! milliscale tables with fixed-layout binary rows.
//!
//! Keys are big-endian so that a table's key order is the spec's primary
//! key order (scans by prefix find a district's orders, an order's lines).
//! Rows are fixed-size byte arrays; every field has a fixed offset, so an
//! update of a numeric field is an `update_range` of just those bytes
//! (delta logging). Money is in cents (`i64`), rates in ten-thousandths
//! (`i32`), dates in microseconds since the epoch (`u64`, 0 = null),
//! strings are fixed-width and zero-padded. The fields that transactions
//! update together are adjacent, so one delta covers them.

/// A field: offset and length within a row.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub off: usize,
    pub len: usize,
}

impl Field {
    pub const fn end(self) -> usize {
        self.off + self.len
    }
}

const fn f(off: usize, len: usize) -> Field {
    Field { off, len }
}

pub fn get_i64(row: &[u8], fl: Field) -> i64 {
    i64::from_le_bytes(row[fl.off..fl.off + 8].try_into().expect("8 bytes"))
}
pub fn get_u64(row: &[u8], fl: Field) -> u64 {
    u64::from_le_bytes(row[fl.off..fl.off + 8].try_into().expect("8 bytes"))
}
pub fn get_i32(row: &[u8], fl: Field) -> i32 {
    i32::from_le_bytes(row[fl.off..fl.off + 4].try_into().expect("4 bytes"))
}
pub fn get_u32(row: &[u8], fl: Field) -> u32 {
    u32::from_le_bytes(row[fl.off..fl.off + 4].try_into().expect("4 bytes"))
}
pub fn get_u8(row: &[u8], fl: Field) -> u8 {
    row[fl.off]
}
pub fn set_i64(row: &mut [u8], fl: Field, v: i64) {
    row[fl.off..fl.off + 8].copy_from_slice(&v.to_le_bytes());
}
pub fn set_u64(row: &mut [u8], fl: Field, v: u64) {
    row[fl.off..fl.off + 8].copy_from_slice(&v.to_le_bytes());
}
pub fn set_i32(row: &mut [u8], fl: Field, v: i32) {
    row[fl.off..fl.off + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn set_u32(row: &mut [u8], fl: Field, v: u32) {
    row[fl.off..fl.off + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn set_u8(row: &mut [u8], fl: Field, v: u8) {
    row[fl.off] = v;
}
pub fn add_i64(row: &mut [u8], fl: Field, by: i64) {
    let v = get_i64(row, fl);
    set_i64(row, fl, v + by);
}
pub fn add_u32(row: &mut [u8], fl: Field, by: u32) {
    let v = get_u32(row, fl);
    set_u32(row, fl, v + by);
}
/// Copy `s` into a fixed-width field, zero-padded (truncated if longer).
pub fn set_str(row: &mut [u8], fl: Field, s: &[u8]) {
    let n = s.len().min(fl.len);
    row[fl.off..fl.off + n].copy_from_slice(&s[..n]);
    row[fl.off + n..fl.end()].fill(0);
}
/// A fixed-width string field without its padding.
pub fn get_str(row: &[u8], fl: Field) -> &[u8] {
    let b = &row[fl.off..fl.end()];
    let n = b.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
    &b[..n]
}

/// The address fields shared by warehouse and district (street 1 and 2,
/// city, state, zip): 71 bytes starting at `at`.
pub const ADDRESS_BYTES: usize = 20 + 20 + 20 + 2 + 9;

pub mod warehouse {
    use super::{Field, f};
    pub const YTD: Field = f(0, 8);
    pub const TAX: Field = f(8, 4);
    pub const NAME: Field = f(12, 10);
    pub const ADDRESS: Field = f(22, super::ADDRESS_BYTES);
    pub const BYTES: usize = 22 + super::ADDRESS_BYTES;
    pub fn key(w: u32) -> [u8; 4] {
        w.to_be_bytes()
    }
}

pub mod district {
    use super::{Field, f};
    pub const YTD: Field = f(0, 8);
    pub const TAX: Field = f(8, 4);
    pub const NEXT_O_ID: Field = f(12, 4);
    pub const NAME: Field = f(16, 10);
    pub const ADDRESS: Field = f(26, super::ADDRESS_BYTES);
    pub const BYTES: usize = 26 + super::ADDRESS_BYTES;
    pub fn key(w: u32, d: u8) -> [u8; 5] {
        let mut k = [0u8; 5];
        k[..4].copy_from_slice(&w.to_be_bytes());
        k[4] = d;
        k
    }
}

pub mod customer {
    use super::{Field, f};
    // Payment updates BALANCE, YTD_PAYMENT and PAYMENT_CNT (bytes 0..20);
    // Delivery updates BALANCE and DELIVERY_CNT (bytes 0..24).
    pub const BALANCE: Field = f(0, 8);
    pub const YTD_PAYMENT: Field = f(8, 8);
    pub const PAYMENT_CNT: Field = f(16, 4);
    pub const DELIVERY_CNT: Field = f(20, 4);
    pub const CREDIT_LIM: Field = f(24, 8);
    pub const DISCOUNT: Field = f(32, 4);
    pub const SINCE: Field = f(36, 8);
    pub const CREDIT: Field = f(44, 2);
    pub const FIRST: Field = f(46, 16);
    pub const MIDDLE: Field = f(62, 2);
    pub const LAST: Field = f(64, 16);
    pub const ADDRESS: Field = f(80, super::ADDRESS_BYTES);
    pub const PHONE: Field = f(151, 16);
    pub const DATA: Field = f(167, 500);
    pub const BYTES: usize = 667;
    pub fn key(w: u32, d: u8, c: u32) -> [u8; 9] {
        let mut k = [0u8; 9];
        k[..5].copy_from_slice(&super::district::key(w, d));
        k[5..].copy_from_slice(&c.to_be_bytes());
        k
    }
}

/// Secondary index for customers by last name: key = district, last name
/// (16 bytes, zero-padded), first name (16), customer id; empty value.
/// Key order is the spec's "sorted by C_FIRST".
pub mod customer_by_name {
    pub const PREFIX_BYTES: usize = 5 + 16;
    pub fn prefix(w: u32, d: u8, last: &[u8]) -> [u8; PREFIX_BYTES] {
        let mut k = [0u8; PREFIX_BYTES];
        k[..5].copy_from_slice(&super::district::key(w, d));
        let n = last.len().min(16);
        k[5..5 + n].copy_from_slice(&last[..n]);
        k
    }
    pub fn key(w: u32, d: u8, last: &[u8], first: &[u8], c: u32) -> Vec<u8> {
        let mut k = prefix(w, d, last).to_vec();
        let mut fst = [0u8; 16];
        let n = first.len().min(16);
        fst[..n].copy_from_slice(&first[..n]);
        k.extend_from_slice(&fst);
        k.extend_from_slice(&c.to_be_bytes());
        k
    }
    /// The customer id at the end of an index key.
    pub fn customer(key: &[u8]) -> u32 {
        u32::from_be_bytes(key[key.len() - 4..].try_into().expect("4 bytes"))
    }
}

/// History has no primary key in the spec; ours is district of the
/// payment, the writer (0 = the loader, `n` = worker `n - 1`) and a
/// sequence number.
pub mod history {
    use super::{Field, f};
    pub const C_ID: Field = f(0, 4);
    pub const C_D_ID: Field = f(4, 1);
    pub const C_W_ID: Field = f(5, 4);
    pub const D_ID: Field = f(9, 1);
    pub const W_ID: Field = f(10, 4);
    pub const DATE: Field = f(14, 8);
    pub const AMOUNT: Field = f(22, 8);
    pub const DATA: Field = f(30, 24);
    pub const BYTES: usize = 54;
    pub fn key(w: u32, d: u8, writer: u32, seq: u64) -> [u8; 17] {
        let mut k = [0u8; 17];
        k[..5].copy_from_slice(&super::district::key(w, d));
        k[5..9].copy_from_slice(&writer.to_be_bytes());
        k[9..].copy_from_slice(&seq.to_be_bytes());
        k
    }
}

/// `new_order`: key = district, order id; value empty.
pub mod new_order {
    pub fn key(w: u32, d: u8, o: u32) -> [u8; 9] {
        super::order::key(w, d, o)
    }
    /// The order id at the end of a key.
    pub fn order(key: &[u8]) -> u32 {
        u32::from_be_bytes(key[5..9].try_into().expect("4 bytes"))
    }
}

/// `oorder` (ORDER is a keyword in SQL; the name follows common practice).
pub mod order {
    use super::{Field, f};
    pub const C_ID: Field = f(0, 4);
    pub const ENTRY_D: Field = f(4, 8);
    /// 0 = null (not delivered).
    pub const CARRIER_ID: Field = f(12, 1);
    pub const OL_CNT: Field = f(13, 1);
    pub const ALL_LOCAL: Field = f(14, 1);
    pub const BYTES: usize = 15;
    pub fn key(w: u32, d: u8, o: u32) -> [u8; 9] {
        let mut k = [0u8; 9];
        k[..5].copy_from_slice(&super::district::key(w, d));
        k[5..].copy_from_slice(&o.to_be_bytes());
        k
    }
    /// The order id at the end of a key.
    pub fn id(key: &[u8]) -> u32 {
        u32::from_be_bytes(key[5..9].try_into().expect("4 bytes"))
    }
}

/// Secondary index for a customer's orders: key = district, customer id,
/// order id; empty value. OrderStatus finds the latest order by a reverse
/// scan of the customer's prefix.
pub mod order_by_customer {
    pub fn prefix(w: u32, d: u8, c: u32) -> [u8; 9] {
        super::customer::key(w, d, c)
    }
    pub fn key(w: u32, d: u8, c: u32, o: u32) -> [u8; 13] {
        let mut k = [0u8; 13];
        k[..9].copy_from_slice(&prefix(w, d, c));
        k[9..].copy_from_slice(&o.to_be_bytes());
        k
    }
    pub fn order(key: &[u8]) -> u32 {
        u32::from_be_bytes(key[9..13].try_into().expect("4 bytes"))
    }
}

pub mod order_line {
    use super::{Field, f};
    pub const I_ID: Field = f(0, 4);
    pub const SUPPLY_W_ID: Field = f(4, 4);
    /// 0 = null (not delivered).
    pub const DELIVERY_D: Field = f(8, 8);
    pub const QUANTITY: Field = f(16, 1);
    pub const AMOUNT: Field = f(17, 8);
    pub const DIST_INFO: Field = f(25, 24);
    pub const BYTES: usize = 49;
    pub fn key(w: u32, d: u8, o: u32, n: u8) -> [u8; 10] {
        let mut k = [0u8; 10];
        k[..9].copy_from_slice(&super::order::key(w, d, o));
        k[9] = n;
        k
    }
}

pub mod item {
    use super::{Field, f};
    pub const IM_ID: Field = f(0, 4);
    pub const PRICE: Field = f(4, 8);
    pub const NAME: Field = f(12, 24);
    pub const DATA: Field = f(36, 50);
    pub const BYTES: usize = 86;
    pub fn key(i: u32) -> [u8; 4] {
        i.to_be_bytes()
    }
}

pub mod stock {
    use super::{Field, f};
    // NewOrder updates QUANTITY, YTD, ORDER_CNT and REMOTE_CNT: bytes 0..20.
    pub const QUANTITY: Field = f(0, 4);
    pub const YTD: Field = f(4, 8);
    pub const ORDER_CNT: Field = f(12, 4);
    pub const REMOTE_CNT: Field = f(16, 4);
    pub const HOT: Field = f(0, 20);
    /// S_DIST_01 .. S_DIST_10, 24 bytes each.
    pub const fn dist(d: u8) -> Field {
        f(20 + (d as usize - 1) * 24, 24)
    }
    pub const DATA: Field = f(260, 50);
    pub const BYTES: usize = 310;
    pub fn key(w: u32, i: u32) -> [u8; 8] {
        let mut k = [0u8; 8];
        k[..4].copy_from_slice(&w.to_be_bytes());
        k[4..].copy_from_slice(&i.to_be_bytes());
        k
    }
}

/// The table names, in creation order.
pub const TABLES: [&str; 11] = [
    "warehouse",
    "district",
    "customer",
    "customer_by_name",
    "history",
    "new_order",
    "oorder",
    "order_by_customer",
    "order_line",
    "item",
    "stock",
];
