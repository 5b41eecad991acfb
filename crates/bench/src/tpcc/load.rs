//! The initial population (spec §4.3.3), loaded in parallel by warehouse.

use milliscale::{CommitAck, Database, Error, Table, Transaction};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::random::*;
use super::schema::*;
use super::{Scale, Tables};

/// Rows per load transaction.
pub const BATCH: usize = 500;

/// Where a loader puts its rows: in process, transactions of [`BATCH`]
/// rows; through a server, one-shot batches (`super::remote`).
pub trait Sink {
    /// How a table is named (see [`super::txns::Txn`]).
    type Table;

    fn put(&mut self, t: &Self::Table, key: &[u8], value: &[u8]) -> Result<(), Error>;
    /// Write what is left; return once every row is durable.
    fn finish(self) -> Result<(), Error>;
}

/// A loader's open transaction, committed every [`BATCH`] rows. Commits are
/// pipelined: the loader waits only for the last ack, which covers the
/// earlier ones (a thread's later commit has a later CSN).
struct Batch<'a> {
    db: &'a Database,
    tx: Option<Transaction<'a>>,
    rows: usize,
    last: Option<CommitAck>,
}

impl<'a> Batch<'a> {
    fn new(db: &'a Database) -> Batch<'a> {
        Batch { db, tx: None, rows: 0, last: None }
    }

    fn flush(&mut self) -> Result<(), Error> {
        if let Some(tx) = self.tx.take() {
            self.last = Some(tx.commit()?);
        }
        self.rows = 0;
        Ok(())
    }
}

impl Sink for Batch<'_> {
    type Table = Table;

    fn put(&mut self, t: &Table, key: &[u8], value: &[u8]) -> Result<(), Error> {
        if self.tx.is_none() {
            self.tx = Some(self.db.begin()?);
        }
        self.tx.as_mut().expect("open").put(t, key, value)?;
        self.rows += 1;
        if self.rows >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), Error> {
        self.flush()?;
        self.last.map_or(Ok(()), |a| a.wait().map(|_| ()))
    }
}

fn address(rng: &mut SmallRng, row: &mut [u8], at: usize) {
    let mut a = Vec::with_capacity(ADDRESS_BYTES);
    for _ in 0..3 {
        let mut s = astring(rng, 10, 20);
        s.resize(20, 0);
        a.extend_from_slice(&s);
    }
    a.extend_from_slice(&astring(rng, 2, 2));
    a.extend_from_slice(&zip(rng));
    row[at..at + ADDRESS_BYTES].copy_from_slice(&a);
}

/// Load ITEM (once) and every warehouse, on `threads` threads.
pub fn load(
    db: &Database,
    t: &Tables,
    scale: Scale,
    warehouses: u32,
    nu: NuConstants,
    threads: usize,
    seed: u64,
) -> Result<(), Error> {
    let population = Population { scale, warehouses, nu, seed };
    load_into(t, population, threads, |_| Ok(Batch::new(db)))
}

/// What to load.
#[derive(Debug, Clone, Copy)]
pub struct Population {
    pub scale: Scale,
    pub warehouses: u32,
    pub nu: NuConstants,
    pub seed: u64,
}

/// Load ITEM (once) and every warehouse on `threads` threads, thread `i`
/// into `sink(i)`.
pub fn load_into<S: Sink>(
    t: &Tables<S::Table>,
    p: Population,
    threads: usize,
    sink: impl Fn(usize) -> Result<S, Error> + Sync,
) -> Result<(), Error>
where
    S::Table: Sync,
{
    let Population { scale, warehouses, nu, seed } = p;
    let threads = threads.clamp(1, warehouses as usize + 1);
    let sink = &sink;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                s.spawn(move || -> Result<(), Error> {
                    let mut rng = SmallRng::seed_from_u64(seed ^ (th as u64) << 32);
                    let mut b = sink(th)?;
                    if th == 0 {
                        load_items(&mut b, t, scale, &mut rng)?;
                    }
                    let mut w = th as u32 + 1;
                    while w <= warehouses {
                        load_warehouse(&mut b, t, scale, w, nu, &mut rng)?;
                        w += threads as u32;
                    }
                    b.finish()
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("loader thread panicked"))
    })
}

fn load_items<S: Sink>(
    b: &mut S,
    t: &Tables<S::Table>,
    scale: Scale,
    rng: &mut SmallRng,
) -> Result<(), Error> {
    let mut row = [0u8; item::BYTES];
    for i in 1..=scale.items {
        set_u32(&mut row, item::IM_ID, rng.random_range(1..=10_000));
        set_i64(&mut row, item::PRICE, rng.random_range(100..=10_000));
        set_str(&mut row, item::NAME, &astring(rng, 14, 24));
        set_str(&mut row, item::DATA, &data_with_original(rng));
        b.put(&t.item, &item::key(i), &row)?;
    }
    Ok(())
}

fn load_warehouse<S: Sink>(
    b: &mut S,
    t: &Tables<S::Table>,
    scale: Scale,
    w: u32,
    nu: NuConstants,
    rng: &mut SmallRng,
) -> Result<(), Error> {
    let mut row = [0u8; warehouse::BYTES];
    set_i64(&mut row, warehouse::YTD, 30_000_000); // 300,000.00
    set_i32(&mut row, warehouse::TAX, rng.random_range(0..=2_000));
    set_str(&mut row, warehouse::NAME, &astring(rng, 6, 10));
    address(rng, &mut row, warehouse::ADDRESS.off);
    b.put(&t.warehouse, &warehouse::key(w), &row)?;

    let mut row = [0u8; stock::BYTES];
    for i in 1..=scale.items {
        set_i32(&mut row, stock::QUANTITY, rng.random_range(10..=100));
        for d in 1..=10 {
            set_str(&mut row, stock::dist(d), &astring(rng, 24, 24));
        }
        set_str(&mut row, stock::DATA, &data_with_original(rng));
        b.put(&t.stock, &stock::key(w, i), &row)?;
    }
    let now = now_micros();
    for d in 1..=10u8 {
        let mut row = [0u8; district::BYTES];
        set_i64(&mut row, district::YTD, 3_000_000); // 30,000.00
        set_i32(&mut row, district::TAX, rng.random_range(0..=2_000));
        set_u32(&mut row, district::NEXT_O_ID, scale.orders + 1);
        set_str(&mut row, district::NAME, &astring(rng, 6, 10));
        address(rng, &mut row, district::ADDRESS.off);
        b.put(&t.district, &district::key(w, d), &row)?;

        for c in 1..=scale.customers {
            let mut row = [0u8; customer::BYTES];
            set_i64(&mut row, customer::BALANCE, -1_000);
            set_i64(&mut row, customer::YTD_PAYMENT, 1_000);
            set_u32(&mut row, customer::PAYMENT_CNT, 1);
            set_i64(&mut row, customer::CREDIT_LIM, 5_000_000);
            set_i32(&mut row, customer::DISCOUNT, rng.random_range(0..=5_000));
            set_u64(&mut row, customer::SINCE, now);
            set_str(&mut row, customer::CREDIT, if rng.random_bool(0.1) { b"BC" } else { b"GC" });
            let first = astring(rng, 8, 16);
            let last = if c <= 1000 {
                last_name(c - 1)
            } else {
                last_name(nurand(rng, 255, 0, 999, nu.c_last_load))
            };
            set_str(&mut row, customer::FIRST, &first);
            set_str(&mut row, customer::MIDDLE, b"OE");
            set_str(&mut row, customer::LAST, &last);
            address(rng, &mut row, customer::ADDRESS.off);
            set_str(&mut row, customer::PHONE, &nstring(rng, 16, 16));
            set_str(&mut row, customer::DATA, &astring(rng, 300, 500));
            b.put(&t.customer, &customer::key(w, d, c), &row)?;
            b.put(&t.customer_by_name, &customer_by_name::key(w, d, &last, &first, c), &[])?;

            let mut h = [0u8; history::BYTES];
            set_u32(&mut h, history::C_ID, c);
            set_u8(&mut h, history::C_D_ID, d);
            set_u32(&mut h, history::C_W_ID, w);
            set_u8(&mut h, history::D_ID, d);
            set_u32(&mut h, history::W_ID, w);
            set_u64(&mut h, history::DATE, now);
            set_i64(&mut h, history::AMOUNT, 1_000);
            set_str(&mut h, history::DATA, &astring(rng, 12, 24));
            b.put(&t.history, &history::key(w, d, 0, u64::from(c)), &h)?;
        }

        // Orders: customer ids are a random permutation (§4.3.3.1).
        let mut owners: Vec<u32> = (1..=scale.customers).collect();
        owners.shuffle(rng);
        let delivered_up_to = scale.orders - scale.new_orders;
        for o in 1..=scale.orders {
            let c = owners[(o as usize - 1) % owners.len()];
            let n = rng.random_range(5..=15u8);
            let delivered = o <= delivered_up_to;
            let mut row = [0u8; order::BYTES];
            set_u32(&mut row, order::C_ID, c);
            set_u64(&mut row, order::ENTRY_D, now);
            set_u8(
                &mut row,
                order::CARRIER_ID,
                if delivered { rng.random_range(1..=10) } else { 0 },
            );
            set_u8(&mut row, order::OL_CNT, n);
            set_u8(&mut row, order::ALL_LOCAL, 1);
            b.put(&t.order, &order::key(w, d, o), &row)?;
            b.put(&t.order_by_customer, &order_by_customer::key(w, d, c, o), &[])?;
            if !delivered {
                b.put(&t.new_order, &new_order::key(w, d, o), &[])?;
            }
            for l in 1..=n {
                let mut ol = [0u8; order_line::BYTES];
                set_u32(&mut ol, order_line::I_ID, rng.random_range(1..=scale.items));
                set_u32(&mut ol, order_line::SUPPLY_W_ID, w);
                set_u64(&mut ol, order_line::DELIVERY_D, if delivered { now } else { 0 });
                set_u8(&mut ol, order_line::QUANTITY, 5);
                set_i64(
                    &mut ol,
                    order_line::AMOUNT,
                    if delivered { 0 } else { rng.random_range(1..=999_999) },
                );
                set_str(&mut ol, order_line::DIST_INFO, &astring(rng, 24, 24));
                b.put(&t.order_line, &order_line::key(w, d, o, l), &ol)?;
            }
        }
    }
    Ok(())
}
