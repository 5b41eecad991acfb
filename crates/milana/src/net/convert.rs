//! Between the protocol's types ([`crate::types`], [`crate::log`]) and
//! their wire messages (`proto/milliscale/v1/milana.proto`).

use tonic::Status;

use super::proto;
use crate::log::Prepare;
use crate::participant::ReadReply;
use crate::types::{CommitTs, TxnId, TxnStatus};

pub fn txn_to(t: TxnId) -> proto::TxnId {
    proto::TxnId { client: t.client, seq: t.seq }
}

pub fn txn_from(t: Option<proto::TxnId>) -> Result<TxnId, Status> {
    let t = t.ok_or_else(|| Status::invalid_argument("a request without its transaction"))?;
    Ok(TxnId { client: t.client, seq: t.seq })
}

pub fn version_to(v: CommitTs) -> proto::CommitTs {
    proto::CommitTs { ts: v.ts, client: v.client }
}

pub fn version_from(v: Option<proto::CommitTs>) -> CommitTs {
    v.map_or(CommitTs::INITIAL, |v| CommitTs { ts: v.ts, client: v.client })
}

pub fn prepare_to(p: &Prepare) -> proto::PrepareRequest {
    proto::PrepareRequest {
        txn: Some(txn_to(p.txn)),
        version: Some(version_to(p.version)),
        reads: p
            .reads
            .iter()
            .map(|(key, v)| proto::ReadVersion { key: key.clone(), version: Some(version_to(*v)) })
            .collect(),
        writes: p
            .writes
            .iter()
            .map(|(key, value)| proto::Write { key: key.clone(), value: value.clone() })
            .collect(),
        participants: p.participants.clone(),
    }
}

pub fn prepare_from(p: proto::PrepareRequest) -> Result<Prepare, Status> {
    let version =
        p.version.ok_or_else(|| Status::invalid_argument("a prepare without a version"))?;
    let mut participants = p.participants;
    participants.sort_unstable();
    participants.dedup();
    Ok(Prepare {
        txn: txn_from(p.txn)?,
        version: CommitTs { ts: version.ts, client: version.client },
        reads: p.reads.into_iter().map(|r| (r.key, version_from(r.version))).collect(),
        writes: p.writes.into_iter().map(|w| (w.key, w.value)).collect(),
        participants,
    })
}

pub fn read_to(r: ReadReply) -> proto::ReadResponse {
    proto::ReadResponse {
        version: Some(version_to(r.version)),
        value: r.value,
        prepared_below: r.prepared_below,
    }
}

pub fn read_from(r: proto::ReadResponse) -> ReadReply {
    ReadReply { version: version_from(r.version), value: r.value, prepared_below: r.prepared_below }
}

pub fn status_to(s: TxnStatus) -> proto::TxnStatus {
    match s {
        TxnStatus::Prepared => proto::TxnStatus::Prepared,
        TxnStatus::Committed => proto::TxnStatus::Committed,
        TxnStatus::Aborted => proto::TxnStatus::Aborted,
    }
}

pub fn status_from(s: i32) -> Option<TxnStatus> {
    match proto::TxnStatus::try_from(s) {
        Ok(proto::TxnStatus::Prepared) => Some(TxnStatus::Prepared),
        Ok(proto::TxnStatus::Committed) => Some(TxnStatus::Committed),
        Ok(proto::TxnStatus::Aborted) => Some(TxnStatus::Aborted),
        _ => None,
    }
}
