//! kill -9 of `milliscale bench bank` at seeded moments, then recovery and
//! the oracle (the harness: `milliscale_faults::kill_bank`).

#[test]
fn kill_9_then_recover_loses_no_acknowledged_transfer_and_keeps_the_total() {
    milliscale_faults::kill_bank::run_bank_trials(std::path::Path::new(env!(
        "CARGO_BIN_EXE_milliscale"
    )));
}
