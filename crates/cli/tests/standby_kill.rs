//! A hot standby takes over from a writer killed with -9 or frozen with
//! SIGSTOP (the harness: `milliscale_faults::kill_standby`).

#[test]
fn a_standby_takes_over_from_a_killed_or_frozen_writer_and_loses_nothing() {
    milliscale_faults::kill_standby::run_standby_trials(std::path::Path::new(env!(
        "CARGO_BIN_EXE_milliscale"
    )));
}
