//! Metrics through the [`metrics`] facade: whatever recorder the program
//! installs (a Prometheus exporter, say; the `milliscale` CLI's
//! `--metrics-addr` installs one) receives them. Without a recorder they
//! cost nothing but a check.
//!
//! Two ways in:
//! - **pushed where they happen**: each acknowledged commit's latency
//!   (the committer records it as it releases the transaction,
//!   `commit::committer`), and each replica's lag (as it applies a run of
//!   transactions, `replica::follow`);
//! - **published from the structs the engine keeps** (the same numbers as
//!   [`crate::Database::log_metrics`] and [`crate::Replica::metrics`]),
//!   by the database's background thread every
//!   `Options::metrics_interval` (1 s by default), or when the program
//!   calls [`crate::Database::publish_metrics`] (this module) or
//!   [`crate::Replica::publish_metrics`] (`replica`). Counters are published as
//!   absolute values.
//!
//! The names, all prefixed `milliscale_`:
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `commit_latency_seconds` | histogram | | pre-commit to acknowledgment |
//! | `commits_total` | counter | | transactions acknowledged |
//! | `commit_dependency_waits_total` | counter | | of those, held for a dependency |
//! | `next_csn` | gauge | | the next CSN to hand out |
//! | `log_appends_total` | counter | `stream` | appends (flushes) written |
//! | `log_bytes_total` | counter | | log bytes written, all stores |
//! | `log_requests_total` | counter | | log write requests, all stores |
//! | `log_usd` | gauge | | what those cost, in dollars |
//! | `log_usd_per_hour` | gauge | | at the measured rate |
//! | `store_parts_total` | counter | `store` | parts written to the store |
//! | `store_hedges_total` | counter | `store` | appends sent a second time |
//! | `store_hedges_won_total` | counter | `store` | of those, won by the second |
//! | `store_healthy` | gauge | `store` | 1, or 0 once a group dropped it |
//! | `store_requests_total` | counter | `store`, `class` | requests (`put`/`get` class), where the store keeps accounts (`sim://`) |
//! | `store_usd` | gauge | `store` | what the store's requests cost, likewise |
//! | `replica_lag_seconds` | histogram | | log landing to visible on a replica |
//! | `replica_applied_csn` | gauge | | every commit below it is visible |
//! | `replica_requests_total` | counter | `class` | the replica's requests |
//! | `replica_usd` | gauge | | what they cost |
//! | `replica_poll_errors_total` | counter | | failed polls (retried) |

use metrics::{counter, gauge};

use crate::engine::Engine;

/// Publish what a database's structs hold.
pub(crate) fn publish_database(engine: &Engine) {
    gauge!("milliscale_next_csn")
        .set(engine.commit.next_csn.load(std::sync::atomic::Ordering::Relaxed) as f64);
    let Some(log) = &engine.log else { return };
    let m = log.metrics();
    counter!("milliscale_commits_total").absolute(m.commit.released);
    counter!("milliscale_commit_dependency_waits_total").absolute(m.commit.waited);
    for s in &m.streams {
        counter!("milliscale_log_appends_total", "stream" => s.stream.to_string())
            .absolute(s.appends);
    }
    counter!("milliscale_log_bytes_total").absolute(m.cost.bytes);
    counter!("milliscale_log_requests_total").absolute(m.cost.requests);
    if let Some(usd) = m.cost.usd {
        gauge!("milliscale_log_usd").set(usd);
    }
    if let Some(h) = m.cost.usd_per_hour() {
        gauge!("milliscale_log_usd_per_hour").set(h);
    }
    for s in &m.stores {
        let store = s.name.clone();
        counter!("milliscale_store_parts_total", "store" => store.clone()).absolute(s.parts);
        counter!("milliscale_store_hedges_total", "store" => store.clone()).absolute(s.hedged);
        counter!("milliscale_store_hedges_won_total", "store" => store.clone())
            .absolute(s.hedges_won);
        gauge!("milliscale_store_healthy", "store" => store.clone()).set(if s.dropped == 0 {
            1.0
        } else {
            0.0
        });
        if let Some(a) = &s.accounting {
            for (class, n) in [("put", a.put_class), ("get", a.get_class)] {
                counter!("milliscale_store_requests_total", "store" => store.clone(), "class" => class)
                    .absolute(n);
            }
            gauge!("milliscale_store_usd", "store" => store.clone()).set(a.cost_usd);
        }
    }
}
