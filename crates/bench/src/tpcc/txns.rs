//! The five TPC-C transactions (spec §2.4 to §2.8): their inputs, drawn as
//! the spec says, and their bodies, written against [`Txn`]: what a body
//! needs of a transaction, which the engine's transactions give in
//! process and `super::remote` gives through `milliscale serve`.

use std::ops::Bound;

use milliscale::{CommitAck, Database, Direction, Error, Table, Transaction, TxnOptions};
use rand::Rng;
use rand::rngs::SmallRng;

use super::random::{NuConstants, now_micros, nurand};
use super::schema::*;
use super::{Scale, Tables};

/// The five transaction types, in the report's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NewOrder,
    Payment,
    OrderStatus,
    Delivery,
    StockLevel,
}

impl Kind {
    pub const ALL: [Kind; 5] =
        [Kind::NewOrder, Kind::Payment, Kind::OrderStatus, Kind::Delivery, Kind::StockLevel];

    pub fn name(self) -> &'static str {
        match self {
            Kind::NewOrder => "new-order",
            Kind::Payment => "payment",
            Kind::OrderStatus => "order-status",
            Kind::Delivery => "delivery",
            Kind::StockLevel => "stock-level",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Who runs the transactions, and how.
pub struct Ctx<'a> {
    pub db: &'a Database,
    pub t: &'a Tables,
    pub scale: Scale,
    pub warehouses: u32,
    pub nu: NuConstants,
    /// Delta logging: updates log only the changed fields. Off: every
    /// update logs the whole row.
    pub delta: bool,
    /// This worker's history writer id (worker + 1) and sequence.
    pub writer: u32,
    pub history_seq: u64,
}

/// How a transaction ended (a conflict is an `Err`).
pub enum Outcome {
    /// Pre-committed; the ack resolves when it is durable.
    Committed(CommitAck),
    /// NewOrder's 1% rollback (an unused item): a completed transaction
    /// in TPC-C's terms, with nothing written.
    RolledBack,
}

/// Customer selection: by id or (60% of Payment and OrderStatus) by last name.
#[derive(Debug, Clone)]
pub enum CustomerBy {
    Id(u32),
    Last(Vec<u8>),
}

#[derive(Debug, Clone)]
pub struct OrderLineInput {
    pub item: u32,
    pub supply_w: u32,
    pub quantity: u8,
}

#[derive(Debug, Clone)]
pub enum Input {
    NewOrder { w: u32, d: u8, c: u32, lines: Vec<OrderLineInput> },
    Payment { w: u32, d: u8, c_w: u32, c_d: u8, c: CustomerBy, amount: i64 },
    OrderStatus { w: u32, d: u8, c: CustomerBy },
    Delivery { w: u32, carrier: u8 },
    StockLevel { w: u32, d: u8, threshold: i32 },
}

fn other_warehouse(rng: &mut SmallRng, w: u32, warehouses: u32) -> u32 {
    if warehouses == 1 {
        return w;
    }
    let o = rng.random_range(1..warehouses);
    if o >= w { o + 1 } else { o }
}

/// What drawing inputs needs to know of the database.
#[derive(Debug, Clone, Copy)]
pub struct InputCtx {
    pub scale: Scale,
    pub warehouses: u32,
    pub nu: NuConstants,
}

impl Ctx<'_> {
    /// What drawing inputs needs of this context.
    pub fn inputs(&self) -> InputCtx {
        InputCtx { scale: self.scale, warehouses: self.warehouses, nu: self.nu }
    }
}

fn customer_by(rng: &mut SmallRng, ctx: &InputCtx) -> CustomerBy {
    if rng.random_bool(0.6) {
        let n = nurand(rng, 255, 0, ctx.scale.name_numbers() - 1, ctx.nu.c_last_run);
        CustomerBy::Last(super::random::last_name(n))
    } else {
        CustomerBy::Id(nurand(rng, 1023, 1, ctx.scale.customers, ctx.nu.c_id))
    }
}

/// Draw the input of a `kind` transaction for home warehouse `w`.
pub fn input(rng: &mut SmallRng, ctx: &InputCtx, kind: Kind, w: u32) -> Input {
    let d = rng.random_range(1..=10u8);
    match kind {
        Kind::NewOrder => {
            let c = nurand(rng, 1023, 1, ctx.scale.customers, ctx.nu.c_id);
            let n = rng.random_range(5..=15);
            let rollback = rng.random_bool(0.01);
            let lines = (0..n)
                .map(|i| OrderLineInput {
                    // The rolled-back order's last item is unused (§2.4.1.4).
                    item: if rollback && i == n - 1 {
                        ctx.scale.items + 1
                    } else {
                        nurand(rng, 8191, 1, ctx.scale.items, ctx.nu.ol_i_id)
                    },
                    supply_w: if rng.random_bool(0.01) {
                        other_warehouse(rng, w, ctx.warehouses)
                    } else {
                        w
                    },
                    quantity: rng.random_range(1..=10),
                })
                .collect();
            Input::NewOrder { w, d, c, lines }
        }
        Kind::Payment => {
            let (c_w, c_d) = if rng.random_bool(0.85) || ctx.warehouses == 1 {
                (w, d)
            } else {
                (other_warehouse(rng, w, ctx.warehouses), rng.random_range(1..=10))
            };
            let c = customer_by(rng, ctx);
            Input::Payment { w, d, c_w, c_d, c, amount: rng.random_range(100..=500_000) }
        }
        Kind::OrderStatus => Input::OrderStatus { w, d, c: customer_by(rng, ctx) },
        Kind::Delivery => Input::Delivery { w, carrier: rng.random_range(1..=10) },
        Kind::StockLevel => Input::StockLevel { w, d, threshold: rng.random_range(10..=20) },
    }
}

/// The smallest key greater than every key that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; prefix.len() + 1] // all 0xff: no key of ours gets here
}

/// Key/value pairs, as a scan returns them.
pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// What a transaction body needs of a transaction: the engine's
/// operations, on tables named by `Self::Table`.
pub trait Txn {
    /// How a table is named: a handle in process, a name over the network.
    type Table;

    fn get(&mut self, t: &Self::Table, key: &[u8]) -> Result<Option<Vec<u8>>, Error>;
    /// Several keys of one table, each as [`Txn::get`] reads it, in order:
    /// in process a get each, through a server one call (`GetMany`).
    fn get_many(&mut self, t: &Self::Table, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, Error> {
        keys.iter().map(|k| self.get(t, k)).collect()
    }
    /// [`Txn::get_many`] of keys in several tables, each `(table, key)`.
    fn get_across(
        &mut self,
        keys: &[(&Self::Table, &[u8])],
    ) -> Result<Vec<Option<Vec<u8>>>, Error> {
        keys.iter().map(|(t, k)| self.get(t, k)).collect()
    }
    fn put(&mut self, t: &Self::Table, key: &[u8], value: &[u8]) -> Result<(), Error>;
    /// Overwrite `patch.len()` bytes of the value at `offset` (a delta).
    fn update_range(
        &mut self,
        t: &Self::Table,
        key: &[u8],
        offset: usize,
        patch: &[u8],
    ) -> Result<(), Error>;
    /// Delete; whether there was a value.
    fn delete(&mut self, t: &Self::Table, key: &[u8]) -> Result<bool, Error>;
    /// The rows from `lower` to `upper`, at most `limit`.
    fn scan(
        &mut self,
        t: &Self::Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
        limit: usize,
    ) -> Result<Rows, Error>;
}

impl Txn for Transaction<'_> {
    type Table = Table;

    fn get(&mut self, t: &Table, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        Transaction::get(self, t, key)
    }

    fn put(&mut self, t: &Table, key: &[u8], value: &[u8]) -> Result<(), Error> {
        Transaction::put(self, t, key, value)
    }

    fn update_range(
        &mut self,
        t: &Table,
        key: &[u8],
        offset: usize,
        patch: &[u8],
    ) -> Result<(), Error> {
        Transaction::update_range(self, t, key, offset, patch)
    }

    fn delete(&mut self, t: &Table, key: &[u8]) -> Result<bool, Error> {
        Transaction::delete(self, t, key)
    }

    fn scan(
        &mut self,
        t: &Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
        limit: usize,
    ) -> Result<Rows, Error> {
        Transaction::scan(self, t, lower, upper, direction, limit)
    }
}

/// Every row whose key starts with `prefix`, in key order.
pub fn scan_prefix<X: Txn + ?Sized>(
    tx: &mut X,
    t: &X::Table,
    prefix: &[u8],
    direction: Direction,
    limit: usize,
) -> Result<Rows, Error> {
    let end = prefix_end(prefix);
    tx.scan(t, Bound::Included(prefix), Bound::Excluded(&end), direction, limit)
}

/// A read of many keys answered with another count of values.
fn wrong_count() -> Error {
    Error::InvalidArgument("TPC-C: a read of many keys got another count of values".into())
}

fn must(row: Option<Vec<u8>>, what: &str) -> Result<Vec<u8>, Error> {
    row.ok_or_else(|| Error::InvalidArgument(format!("TPC-C: {what} is missing")))
}

/// Write a changed row back: with delta logging each changed field as an
/// `update_range`, else the whole row.
fn write_back<X: Txn + ?Sized>(
    tx: &mut X,
    t: &X::Table,
    key: &[u8],
    row: &[u8],
    fields: &[Field],
    delta: bool,
) -> Result<(), Error> {
    if delta {
        for f in fields {
            tx.update_range(t, key, f.off, &row[f.off..f.end()])?;
        }
        Ok(())
    } else {
        tx.put(t, key, row)
    }
}

/// Find the customer (§2.5.2.2: by last name, the one at position
/// ceil(n/2) of those sorted by first name). Returns id and row.
fn find_customer<X: Txn + ?Sized>(
    tx: &mut X,
    t: &Tables<X::Table>,
    w: u32,
    d: u8,
    by: &CustomerBy,
) -> Result<(u32, Vec<u8>), Error> {
    let c = match by {
        CustomerBy::Id(c) => *c,
        CustomerBy::Last(last) => {
            let prefix = customer_by_name::prefix(w, d, last);
            let found = scan_prefix(tx, &t.customer_by_name, &prefix, Direction::Forward, 3_000)?;
            if found.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "TPC-C: no customer named {} in district {w}/{d}",
                    String::from_utf8_lossy(last)
                )));
            }
            customer_by_name::customer(&found[found.len().div_ceil(2) - 1].0)
        }
    };
    let row = must(tx.get(&t.customer, &customer::key(w, d, c))?, "a customer")?;
    Ok((c, row))
}

/// Run one transaction in process. A `Conflict` error means: retry the
/// same input.
pub fn execute(ctx: &mut Ctx<'_>, input: &Input) -> Result<Outcome, Error> {
    let mut tx =
        ctx.db.begin_with(TxnOptions { read_only: input.read_only(), ..Default::default() })?;
    let mut terminal =
        Terminal { delta: ctx.delta, writer: ctx.writer, history_seq: ctx.history_seq };
    let done = body(&mut tx, ctx.t, &mut terminal, input);
    ctx.history_seq = terminal.history_seq;
    match done? {
        Done::Commit => Ok(Outcome::Committed(tx.commit()?)),
        Done::RollBack => {
            tx.abort();
            Ok(Outcome::RolledBack)
        }
    }
}

impl Input {
    /// OrderStatus and StockLevel only read.
    pub fn read_only(&self) -> bool {
        matches!(self, Input::OrderStatus { .. } | Input::StockLevel { .. })
    }
}

/// What a body needs of the terminal that runs it.
pub struct Terminal {
    /// Log updates as deltas of the changed fields (off: whole rows).
    pub delta: bool,
    /// The terminal's history writer id and last sequence number.
    pub writer: u32,
    pub history_seq: u64,
}

/// How a body ended: commit it, or roll it back (NewOrder's unused item).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    Commit,
    RollBack,
}

/// The body of one transaction on `tx`; the caller commits or rolls back
/// as it says. A `Conflict` error means: retry the same input.
#[allow(
    clippy::too_many_lines,
    reason = "the five TPC-C transactions as the specification writes them, one arm each"
)]
pub fn body<X: Txn + ?Sized>(
    tx: &mut X,
    t: &Tables<X::Table>,
    terminal: &mut Terminal,
    input: &Input,
) -> Result<Done, Error> {
    let delta = terminal.delta;
    match input {
        Input::NewOrder { w, d, c, lines } => {
            let (w, d) = (*w, *d);
            // The warehouse, the district and the customer, in one read.
            let (wk, dk, ck) = (warehouse::key(w), district::key(w, d), customer::key(w, d, *c));
            let rows =
                tx.get_across(&[(&t.warehouse, &wk), (&t.district, &dk), (&t.customer, &ck)])?;
            let [w_row, d_row, c_row] = <[_; 3]>::try_from(rows).map_err(|_| wrong_count())?;
            let (w_row, c_row) = (must(w_row, "a warehouse")?, must(c_row, "a customer")?);
            let mut d_row = must(d_row, "a district")?;
            let o = get_u32(&d_row, district::NEXT_O_ID);
            set_u32(&mut d_row, district::NEXT_O_ID, o + 1);
            write_back(tx, &t.district, &dk, &d_row, &[district::NEXT_O_ID], delta)?;
            let all_local = lines.iter().all(|l| l.supply_w == w);
            let mut o_row = [0u8; order::BYTES];
            set_u32(&mut o_row, order::C_ID, *c);
            set_u64(&mut o_row, order::ENTRY_D, now_micros());
            set_u8(&mut o_row, order::OL_CNT, lines.len() as u8);
            set_u8(&mut o_row, order::ALL_LOCAL, u8::from(all_local));
            tx.put(&t.order, &order::key(w, d, o), &o_row)?;
            tx.put(&t.new_order, &new_order::key(w, d, o), &[])?;
            tx.put(&t.order_by_customer, &order_by_customer::key(w, d, *c, o), &[])?;
            // The lines' items, then their stock rows, each in one read.
            let item_keys: Vec<_> = lines.iter().map(|l| item::key(l.item)).collect();
            let items =
                tx.get_many(&t.item, &item_keys.iter().map(|k| &k[..]).collect::<Vec<_>>())?;
            let Some(items) = items.into_iter().collect::<Option<Vec<_>>>() else {
                // §2.4.2.3: an unused item rolls the whole order back.
                return Ok(Done::RollBack);
            };
            let stock_keys: Vec<_> = lines.iter().map(|l| stock::key(l.supply_w, l.item)).collect();
            let mut stocks =
                tx.get_many(&t.stock, &stock_keys.iter().map(|k| &k[..]).collect::<Vec<_>>())?;
            let mut total = 0i64;
            for (n, l) in lines.iter().enumerate() {
                let i_row = &items[n];
                let sk = stock_keys[n];
                // A row an earlier line of this order changed reads as
                // changed (the transaction sees its own writes).
                let row = match stock_keys[..n].iter().rposition(|k| *k == sk) {
                    Some(j) => stocks[j].clone(),
                    None => stocks[n].take(),
                };
                let mut s_row = must(row, "a stock row")?;
                let q = get_i32(&s_row, stock::QUANTITY);
                let ol_q = i32::from(l.quantity);
                set_i32(
                    &mut s_row,
                    stock::QUANTITY,
                    if q >= ol_q + 10 { q - ol_q } else { q - ol_q + 91 },
                );
                add_i64(&mut s_row, stock::YTD, i64::from(ol_q));
                add_u32(&mut s_row, stock::ORDER_CNT, 1);
                if l.supply_w != w {
                    add_u32(&mut s_row, stock::REMOTE_CNT, 1);
                }
                write_back(tx, &t.stock, &sk, &s_row, &[stock::HOT], delta)?;
                let amount = i64::from(l.quantity) * get_i64(i_row, item::PRICE);
                total += amount;
                let mut ol = [0u8; order_line::BYTES];
                set_u32(&mut ol, order_line::I_ID, l.item);
                set_u32(&mut ol, order_line::SUPPLY_W_ID, l.supply_w);
                set_u8(&mut ol, order_line::QUANTITY, l.quantity);
                set_i64(&mut ol, order_line::AMOUNT, amount);
                set_str(&mut ol, order_line::DIST_INFO, get_str(&s_row, stock::dist(d)));
                tx.put(&t.order_line, &order_line::key(w, d, o, n as u8 + 1), &ol)?;
                stocks[n] = Some(s_row);
            }
            // The order's total, as the terminal would display it.
            let tax = 10_000 + get_i32(&w_row, warehouse::TAX) + get_i32(&d_row, district::TAX);
            let discount = 10_000 - get_i32(&c_row, customer::DISCOUNT);
            std::hint::black_box(total * i64::from(tax) / 10_000 * i64::from(discount) / 10_000);
        }
        Input::Payment { w, d, c_w, c_d, c, amount } => {
            let (w, d, amount) = (*w, *d, *amount);
            // The warehouse and the district, in one read.
            let (wk, dk) = (warehouse::key(w), district::key(w, d));
            let rows = tx.get_across(&[(&t.warehouse, &wk), (&t.district, &dk)])?;
            let [w_row, d_row] = <[_; 2]>::try_from(rows).map_err(|_| wrong_count())?;
            let (mut w_row, mut d_row) = (must(w_row, "a warehouse")?, must(d_row, "a district")?);
            add_i64(&mut w_row, warehouse::YTD, amount);
            write_back(tx, &t.warehouse, &wk, &w_row, &[warehouse::YTD], delta)?;
            add_i64(&mut d_row, district::YTD, amount);
            write_back(tx, &t.district, &dk, &d_row, &[district::YTD], delta)?;
            let (c_id, mut c_row) = find_customer(tx, t, *c_w, *c_d, c)?;
            add_i64(&mut c_row, customer::BALANCE, -amount);
            add_i64(&mut c_row, customer::YTD_PAYMENT, amount);
            add_u32(&mut c_row, customer::PAYMENT_CNT, 1);
            let hot = Field { off: 0, len: customer::PAYMENT_CNT.end() };
            let ck = customer::key(*c_w, *c_d, c_id);
            if get_str(&c_row, customer::CREDIT) == b"BC" {
                // §2.5.2.2: prepend the payment to C_DATA, keep 500 chars.
                let mut data = format!("{c_id} {c_d} {c_w} {d} {w} {amount}|").into_bytes();
                data.extend_from_slice(get_str(&c_row, customer::DATA));
                set_str(&mut c_row, customer::DATA, &data);
                write_back(tx, &t.customer, &ck, &c_row, &[hot, customer::DATA], delta)?;
            } else {
                write_back(tx, &t.customer, &ck, &c_row, &[hot], delta)?;
            }
            let mut h = [0u8; history::BYTES];
            set_u32(&mut h, history::C_ID, c_id);
            set_u8(&mut h, history::C_D_ID, *c_d);
            set_u32(&mut h, history::C_W_ID, *c_w);
            set_u8(&mut h, history::D_ID, d);
            set_u32(&mut h, history::W_ID, w);
            set_u64(&mut h, history::DATE, now_micros());
            set_i64(&mut h, history::AMOUNT, amount);
            let mut data = get_str(&w_row, warehouse::NAME).to_vec();
            data.extend_from_slice(b"    ");
            data.extend_from_slice(get_str(&d_row, district::NAME));
            set_str(&mut h, history::DATA, &data);
            terminal.history_seq += 1;
            tx.put(&t.history, &history::key(w, d, terminal.writer, terminal.history_seq), &h)?;
        }
        Input::OrderStatus { w, d, c } => {
            let (c_id, c_row) = find_customer(tx, t, *w, *d, c)?;
            std::hint::black_box(get_i64(&c_row, customer::BALANCE));
            let prefix = order_by_customer::prefix(*w, *d, c_id);
            let last = scan_prefix(tx, &t.order_by_customer, &prefix, Direction::Backward, 1)?;
            // A customer may have no order when the population is scaled down.
            if let Some((k, _)) = last.first() {
                let o = order_by_customer::order(k);
                let o_row = must(tx.get(&t.order, &order::key(*w, *d, o))?, "an order")?;
                let lines =
                    scan_prefix(tx, &t.order_line, &order::key(*w, *d, o), Direction::Forward, 15)?;
                if lines.len() != usize::from(get_u8(&o_row, order::OL_CNT)) {
                    return Err(Error::InvalidArgument(format!(
                        "TPC-C: order {w}/{d}/{o} has {} lines, not {}",
                        lines.len(),
                        get_u8(&o_row, order::OL_CNT)
                    )));
                }
            }
        }
        Input::Delivery { w, carrier } => {
            let w = *w;
            let now = now_micros();
            for d in 1..=10u8 {
                let oldest =
                    scan_prefix(tx, &t.new_order, &district::key(w, d), Direction::Forward, 1)?;
                let Some((no_key, _)) = oldest.first() else { continue };
                let o = new_order::order(no_key);
                tx.delete(&t.new_order, no_key)?;
                let ok = order::key(w, d, o);
                let mut o_row = must(tx.get(&t.order, &ok)?, "an order")?;
                set_u8(&mut o_row, order::CARRIER_ID, *carrier);
                write_back(tx, &t.order, &ok, &o_row, &[order::CARRIER_ID], delta)?;
                let c_id = get_u32(&o_row, order::C_ID);
                let mut sum = 0i64;
                for (k, mut ol) in scan_prefix(tx, &t.order_line, &ok, Direction::Forward, 15)? {
                    set_u64(&mut ol, order_line::DELIVERY_D, now);
                    sum += get_i64(&ol, order_line::AMOUNT);
                    write_back(tx, &t.order_line, &k, &ol, &[order_line::DELIVERY_D], delta)?;
                }
                let ck = customer::key(w, d, c_id);
                let mut c_row = must(tx.get(&t.customer, &ck)?, "a customer")?;
                add_i64(&mut c_row, customer::BALANCE, sum);
                add_u32(&mut c_row, customer::DELIVERY_CNT, 1);
                let hot = Field { off: 0, len: customer::DELIVERY_CNT.end() };
                write_back(tx, &t.customer, &ck, &c_row, &[hot], delta)?;
            }
        }
        Input::StockLevel { w, d, threshold } => {
            let d_row = must(tx.get(&t.district, &district::key(*w, *d))?, "a district")?;
            let next = get_u32(&d_row, district::NEXT_O_ID);
            let from = order_line::key(*w, *d, next.saturating_sub(20), 0);
            let to = order_line::key(*w, *d, next, 0);
            let lines = tx.scan(
                &t.order_line,
                Bound::Included(&from),
                Bound::Excluded(&to),
                Direction::Forward,
                usize::MAX,
            )?;
            let mut items: Vec<u32> =
                lines.iter().map(|(_, v)| get_u32(v, order_line::I_ID)).collect();
            items.sort_unstable();
            items.dedup();
            let keys: Vec<_> = items.iter().map(|&i| stock::key(*w, i)).collect();
            let stocks = tx.get_many(&t.stock, &keys.iter().map(|k| &k[..]).collect::<Vec<_>>())?;
            let mut low = 0;
            for s in stocks {
                let s = must(s, "a stock row")?;
                low += usize::from(get_i32(&s, stock::QUANTITY) < *threshold);
            }
            std::hint::black_box(low);
        }
    }
    Ok(Done::Commit)
}
