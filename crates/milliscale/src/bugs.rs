//! Deliberate bugs: plausible mistakes in the engine's durability rules,
//! each behind a switch that only tests turn on, and each caught by a test
//! that injects faults or crashes and checks with an oracle. A test of an
//! oracle that has never failed proves little; one that fails on each of
//! these shows what it can see.
//!
//! The switch is [`crate::Options::deliberate_bug`], which exists only
//! with the crate's `deliberate-bugs` feature (this repository's tests
//! build with it; users' builds do not). Without the feature a
//! [`Bugs::on`] check is a constant `false`, and the compiler drops the
//! branch.
//!
//! | bug | broken rule | caught by |
//! |---|---|---|
//! | [`DeliberateBug::AckBeforeQuorum`] | a part is durable once a quorum of stores holds it (invariant 2) | `commit_durability.rs`: every acknowledged CSN is on a quorum |
//! | [`DeliberateBug::UntrackedDependency`] | a commit is acknowledged only once what it read or overwrote is durable (the DSN, paper §4.2) | `commit_durability.rs`: what an acknowledged transaction read is on a quorum |
//! | [`DeliberateBug::TruncatePastCheckpoint`] | truncation deletes only log segments the newest checkpoint covers (invariant 8) | `faults/tests/crash.rs`: acknowledged transfers survive recovery |

/// One deliberate bug; see the module's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliberateBug {
    /// Acknowledge a log part once one store holds it, not a quorum.
    AckBeforeQuorum,
    /// Record no commit dependency on a version another transaction
    /// committed, read or overwritten: the DSN stays where the
    /// transaction's own writes put it, so a commit can be acknowledged
    /// while the commit it read from is not yet durable.
    UntrackedDependency,
    /// After a checkpoint, delete each log chain's first segment from the
    /// checkpoint's start on too (an off-by-one in the bound), whose
    /// records the checkpoint does not hold.
    TruncatePastCheckpoint,
}

/// The deliberate bug a database runs with, if any (none without the
/// `deliberate-bugs` feature).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Bugs {
    #[cfg(feature = "deliberate-bugs")]
    pub(crate) bug: Option<DeliberateBug>,
}

impl Bugs {
    /// Whether `bug` is switched on.
    #[inline(always)]
    pub(crate) fn on(self, bug: DeliberateBug) -> bool {
        #[cfg(feature = "deliberate-bugs")]
        {
            self.bug == Some(bug)
        }
        #[cfg(not(feature = "deliberate-bugs"))]
        {
            let _ = bug;
            false
        }
    }
}
