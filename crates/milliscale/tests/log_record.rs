//! The log record format: property tests (round trips; arbitrary, truncated
//! and mutated input never panics and never decodes to something else) and
//! golden samples in `testdata/log/`, which pin the bytes of format v1.
//!
//! `MILLISCALE_BLESS=1 cargo test -p milliscale --test engine log_record` rewrites the golden
//! files; do that only together with a format version bump.

use bytes::Bytes;
use milliscale::internals::record::{
    DecodeError, Entry, Op, PART_HEADER_BYTES, PartBuilder, Record, Records, decode_part,
    decode_segment,
};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from);
    prop_oneof![
        bytes().prop_map(Op::Insert),
        bytes().prop_map(Op::Update),
        (any::<u32>(), bytes()).prop_map(|(offset, bytes)| Op::Delta { offset, bytes }),
        Just(Op::Delete),
    ]
}

fn entry() -> impl Strategy<Value = Entry> {
    let record = (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..20), op())
        .prop_map(|(table, key, op)| Record { table, key: Bytes::from(key), op });
    prop_oneof![
        (any::<u64>(), any::<u64>(), proptest::collection::vec(record, 0..6))
            .prop_map(|(csn, dsn, records)| Entry::Commit { csn, dsn, records: records.into() }),
        any::<u64>().prop_map(|csn| Entry::Abort { csn }),
    ]
}

fn encode(group: u32, entries: &[Entry]) -> Bytes {
    let mut p = PartBuilder::new(group, 0);
    for e in entries {
        p.push(e);
    }
    p.finish()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parts_round_trip(group: u32, entries in proptest::collection::vec(entry(), 0..8)) {
        let bytes = encode(group, &entries);
        let (part, n) = decode_part(&bytes).expect("decodes");
        prop_assert_eq!(n, bytes.len());
        prop_assert_eq!(part.group, group);
        prop_assert_eq!(part.entries, entries);
    }

    #[test]
    fn segments_decode_part_by_part(parts in proptest::collection::vec(
        proptest::collection::vec(entry(), 0..4), 1..5), cut in any::<prop::sample::Index>()) {
        let encoded: Vec<Bytes> = parts.iter().map(|p| encode(0, p)).collect();
        let seg: Vec<u8> = encoded.iter().flat_map(|b| b.iter().copied()).collect();
        let (decoded, tail) = decode_segment(&Bytes::from(seg.clone()));
        prop_assert!(tail.is_none());
        prop_assert_eq!(decoded.len(), parts.len());
        // Cut anywhere: the whole parts before the cut decode, the rest is a
        // torn tail reported at a part boundary.
        let cut = cut.index(seg.len());
        let (decoded, tail) = decode_segment(&Bytes::from(seg[..cut].to_vec()));
        let whole = encoded.iter().scan(0, |end, b| { *end += b.len(); Some(*end) })
            .take_while(|&end| end <= cut).count();
        prop_assert_eq!(decoded.len(), whole);
        if let Some((at, _)) = tail {
            prop_assert_eq!(at, encoded[..whole].iter().map(Bytes::len).sum::<usize>());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_part(&Bytes::from(bytes.clone()));
        let _ = decode_segment(&Bytes::from(bytes));
    }

    #[test]
    fn mutated_parts_are_rejected(entries in proptest::collection::vec(entry(), 1..5),
                                  at in any::<prop::sample::Index>(), xor in 1u8..) {
        let mut v = encode(1, &entries).to_vec();
        let i = at.index(v.len());
        v[i] ^= xor;
        prop_assert!(decode_part(&Bytes::from(v)).is_err(), "a change at byte {} went unnoticed", i);
    }

    /// Damage behind a valid checksum (a buggy or hostile writer): the
    /// decoder must still stay inside the bytes and report `Malformed`.
    #[test]
    fn resealed_garbage_is_malformed_not_a_panic(body in proptest::collection::vec(any::<u8>(), 0..200),
                                                 count in 0u32..20) {
        let mut v = vec![0u8; PART_HEADER_BYTES];
        v[..4].copy_from_slice(b"MSLP");
        v[4] = 1;
        v[12..16].copy_from_slice(&(body.len() as u32).to_le_bytes());
        v[24..28].copy_from_slice(&count.to_le_bytes());
        v.extend_from_slice(&body);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&v[..28]), &v[PART_HEADER_BYTES..]);
        v[28..32].copy_from_slice(&crc.to_le_bytes());
        match decode_part(&Bytes::from(v)) {
            Ok(_) | Err(DecodeError::Malformed(_)) => {}
            Err(e) => prop_assert!(false, "a sealed part failed with {e}"),
        }
    }
}

/// The samples the golden files hold.
fn golden_samples() -> Vec<(&'static str, Bytes)> {
    let b = |s: &[u8]| Bytes::copy_from_slice(s);
    vec![
        ("empty", encode(0, &[])),
        ("abort", encode(1, &[Entry::Abort { csn: 42 }])),
        (
            "commit",
            encode(
                3,
                &[
                    Entry::Commit {
                        csn: 100,
                        dsn: 97,
                        records: Records::new(&[
                            Record { table: 1, key: b(b"user1"), op: Op::Insert(b(b"alice")) },
                            Record { table: 1, key: b(b"user2"), op: Op::Update(b(b"bob")) },
                            Record {
                                table: 2,
                                key: b(b"acct"),
                                op: Op::Delta { offset: 8, bytes: b(&[0xff, 0x01]) },
                            },
                            Record { table: 2, key: b(b"old"), op: Op::Delete },
                        ]),
                    },
                    Entry::Abort { csn: 101 },
                ],
            ),
        ),
    ]
}

#[test]
fn golden_samples_pin_format_v1() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/log");
    let bless = std::env::var_os("MILLISCALE_BLESS").is_some();
    for (name, bytes) in golden_samples() {
        let path = dir.join(format!("part-v1-{name}.bin"));
        if bless {
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::write(&path, &bytes).expect("write golden");
        }
        let golden = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (MILLISCALE_BLESS=1 writes it)", path.display()));
        assert_eq!(&bytes[..], &golden[..], "{name}: the encoder no longer writes format v1");
        let (part, _) = decode_part(&Bytes::from(golden)).expect("the golden file decodes");
        assert_eq!(decode_part(&bytes).expect("decodes").0, part);
    }
}
