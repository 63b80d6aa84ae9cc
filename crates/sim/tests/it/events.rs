//! The emitters declare exactly the real Polymarket events: topic0 of each canonical signature,
//! computed here with sha3, equals the constants in REFERENCES.md, and the compiled ABIs
//! declare those events (names, types, indexed flags) and the `emitMatch` the sim encodes.

use crate::common::*;
use pmw_sim::contracts::{self, EMIT_MATCH_V1, EMIT_MATCH_V2};
use pmw_sim::Version;

#[test]
fn topic0_of_each_signature_is_the_reference_constant() {
    let cases = [
        (contracts::ORDER_FILLED_V1, V1_ORDER_FILLED),
        (contracts::ORDERS_MATCHED_V1, V1_ORDERS_MATCHED),
        (contracts::ORDER_FILLED_V2, V2_ORDER_FILLED),
        (contracts::ORDERS_MATCHED_V2, V2_ORDERS_MATCHED),
    ];
    for (sig, reference) in cases {
        assert_eq!(keccak_hex(sig), reference, "{sig}");
    }
    assert_eq!(
        Version::V1.order_filled_topic().to_string(),
        V1_ORDER_FILLED
    );
    assert_eq!(
        Version::V1.orders_matched_topic().to_string(),
        V1_ORDERS_MATCHED
    );
    assert_eq!(
        Version::V2.order_filled_topic().to_string(),
        V2_ORDER_FILLED
    );
    assert_eq!(
        Version::V2.orders_matched_topic().to_string(),
        V2_ORDERS_MATCHED
    );
}

#[test]
fn compiled_abis_declare_exactly_the_real_events() {
    let indexed = |n: usize, total: usize| (0..total).map(|i| i < n).collect::<Vec<bool>>();
    for (v, filled, matched, filled_params) in [
        (
            Version::V1,
            contracts::ORDER_FILLED_V1,
            contracts::ORDERS_MATCHED_V1,
            8,
        ),
        (
            Version::V2,
            contracts::ORDER_FILLED_V2,
            contracts::ORDERS_MATCHED_V2,
            10,
        ),
    ] {
        let mut events = v.artifact().events();
        events.sort();
        let mut want = vec![
            (filled.to_string(), indexed(3, filled_params)),
            (matched.to_string(), indexed(2, 6)),
        ];
        want.sort();
        assert_eq!(events, want, "{v} ABI events");
        for (sig, _) in &events {
            let topic = keccak_hex(sig);
            assert!(
                [
                    V1_ORDER_FILLED,
                    V1_ORDERS_MATCHED,
                    V2_ORDER_FILLED,
                    V2_ORDERS_MATCHED
                ]
                .contains(&topic.as_str()),
                "{sig} has an unknown topic {topic}"
            );
        }
    }
}

#[test]
fn emit_match_selector_matches_the_compiled_contract() {
    for (v, sig) in [(Version::V1, EMIT_MATCH_V1), (Version::V2, EMIT_MATCH_V2)] {
        let a = v.artifact();
        assert_eq!(a.method_identifiers.len(), 1, "{v}: only emitMatch");
        assert_eq!(
            a.method_identifiers.get(sig),
            Some(&hex::encode(v.emit_match_selector())),
            "{v}"
        );
        assert!(
            a.solc.starts_with("0.8.37+"),
            "{v} compiled with {}",
            a.solc
        );
        assert!(!a.runtime_code.is_empty());
    }
}
