//! Decoder tests that must not produce fills: non-`OrderFilled` logs, every rejection, and
//! random or corrupted input (which must never panic).

use super::*;

#[test]
fn non_order_filled_logs_from_exchanges_are_skipped() {
    let allow = Allowlist::default();
    let matched_v1 = raw(
        V1_CTF,
        &[T_MATCHED_V1, ORDER_HASH, MAKER],
        &[ZERO, TOKEN_A, ONE, ONE],
    );
    assert_eq!(decode(&matched_v1, &allow), Ok(None));
    let mut matched_v2 = v2_buy();
    matched_v2.topics = vec![ORDERS_MATCHED_V2, w32(ORDER_HASH), w32(MAKER)];
    assert_eq!(decode(&matched_v2, &allow), Ok(None));
    // OrdersMatched V1 topic on a V2 exchange: not an OrderFilled, so not a fill either.
    let mut odd = v2_buy();
    odd.topics[0] = ORDERS_MATCHED_V1;
    assert_eq!(decode(&odd, &allow), Ok(None));
    let mut anonymous = v1_buy();
    anonymous.topics.clear();
    assert_eq!(decode(&anonymous, &allow), Ok(None));
}

#[test]
fn fake_emitter_with_the_real_topic_is_rejected() {
    let mut fake = v1_buy();
    fake.address = addr("5fbdb2315678afecb367f032d93f642f64180aa3");
    let e = err(&fake);
    assert!(matches!(e, DecodeError::UnknownEmitter { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "log at block 86200001 log 7 (tx 0x{}) was emitted by \
             0x5fbdb2315678afecb367f032d93f642f64180aa3, which is not an allowlisted exchange; \
             ignored (anyone can emit a log with the exchange's topics)",
            "cc".repeat(32)
        )
    );
}

#[test]
fn wrong_version_topic_for_the_emitter_is_rejected() {
    let mut v1_topic_on_v2 = v2_buy();
    v1_topic_on_v2.topics[0] = w32(T_FILLED_V1);
    let e = err(&v1_topic_on_v2);
    assert!(
        e.to_string()
            .contains("is a V2 exchange but the log carries the V1 OrderFilled"),
        "{e}"
    );
    let mut v2_topic_on_v1 = v1_sell();
    v2_topic_on_v1.topics[0] = w32(T_FILLED_V2);
    assert!(matches!(
        err(&v2_topic_on_v1),
        DecodeError::VersionMismatch {
            emitter_version: AbiVersion::V1,
            topic_version: AbiVersion::V2,
            ..
        }
    ));
}

#[test]
fn wrong_topic_count_is_rejected() {
    for n in [1, 2, 3, 5] {
        let mut log = v1_buy();
        log.topics.resize(n, [0u8; 32]);
        match err(&log) {
            DecodeError::TopicCount { got, .. } => assert_eq!(got, n),
            other => panic!("{n} topics: {other:?}"),
        }
    }
    let mut log = v2_buy();
    log.topics.pop();
    assert!(err(&log).to_string().contains("has 3 topics, expected 4"));
}

#[test]
fn short_and_long_data_is_rejected() {
    for (full, words) in [(v1_buy(), 5usize), (v2_sell(), 7)] {
        for len in (0..words * 32).chain([words * 32 + 1, words * 32 + 32]) {
            let mut log = full.clone();
            log.data.resize(len, 0);
            match err(&log) {
                DecodeError::DataLength { got, expected, .. } => {
                    assert_eq!((got, expected), (len, words * 32))
                }
                other => panic!("{len} bytes: {other:?}"),
            }
        }
    }
    let mut log = v1_buy();
    log.data.truncate(100);
    assert!(err(&log)
        .to_string()
        .contains("has 100 data bytes, expected 160 (5 words of 32 bytes)"));
}

#[test]
fn address_topic_with_high_bytes_is_rejected() {
    let mut log = v1_buy();
    log.topics[2][0] = 1;
    assert!(matches!(
        err(&log),
        DecodeError::NotAnAddress { field: "maker", .. }
    ));
    let mut log = v2_buy();
    log.topics[3][11] = 0xff;
    let e = err(&log);
    assert!(
        matches!(e, DecodeError::NotAnAddress { field: "taker", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("non-zero upper 12 bytes"), "{e}");
}

#[test]
fn v2_side_must_be_zero_or_one() {
    let two = "0000000000000000000000000000000000000000000000000000000000000002";
    let high = "0100000000000000000000000000000000000000000000000000000000000000";
    for side in [two, high] {
        let mut log = v2_buy();
        log.data[..32].copy_from_slice(&w32(side));
        assert!(
            matches!(err(&log), DecodeError::BadSide { .. }),
            "side {side}"
        );
    }
    let mut log = v2_buy();
    log.data[31] = 2;
    assert!(err(&log)
        .to_string()
        .contains("side is 2, expected 0 (BUY) or 1 (SELL)"));
}

#[test]
fn zero_shares_is_rejected() {
    let mut buy = v1_buy();
    buy.data[96..128].fill(0); // takerAmountFilled = shares of a V1 BUY
    assert!(matches!(
        err(&buy),
        DecodeError::ZeroShares {
            version: AbiVersion::V1,
            ..
        }
    ));
    let mut sell = v2_sell();
    sell.data[64..96].fill(0); // makerAmountFilled = shares of a V2 SELL
    let e = err(&sell);
    assert!(
        matches!(
            e,
            DecodeError::ZeroShares {
                version: AbiVersion::V2,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("fills zero shares (collateral 38000000 base units)"),
        "{e}"
    );
    // Zero collateral is a (free) fill, not an error.
    let mut free = v2_buy();
    free.data[64..96].fill(0);
    assert_eq!(
        fill(&free).price(),
        Price {
            text: "0".into(),
            exact: true
        }
    );
}

#[test]
fn v1_needs_exactly_one_collateral_asset_and_v2_a_token() {
    let mut both_zero = v1_buy();
    both_zero.data[32..64].fill(0);
    assert!(matches!(err(&both_zero), DecodeError::V1AssetIds { .. }));
    let mut neither_zero = v1_sell();
    neither_zero.data[32..64].copy_from_slice(&w32(TOKEN_A));
    assert!(matches!(err(&neither_zero), DecodeError::V1AssetIds { .. }));
    let mut no_token = v2_buy();
    no_token.data[32..64].fill(0);
    assert!(matches!(err(&no_token), DecodeError::ZeroTokenId { .. }));
}

/// xorshift64*: deterministic pseudo-random bytes without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }
    fn word(&mut self) -> [u8; 32] {
        let mut w = [0u8; 32];
        for b in w.iter_mut() {
            *b = self.next() as u8;
        }
        // Often small, so sides, zero ids and valid addresses come up.
        match self.below(4) {
            0 => w[..31].fill(0),
            1 => w[..12].fill(0),
            _ => {}
        }
        w
    }
}

#[test]
fn random_and_mutated_input_never_panics() {
    let allow = Allowlist::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let emitters = [
        V1_CTF,
        V1_NEG_RISK,
        V2_CTF,
        V2_NEG_RISK,
        "5fbdb2315678afecb367f032d93f642f64180aa3",
    ];
    let topic0s = [
        w32(T_FILLED_V1),
        w32(T_FILLED_V2),
        ORDERS_MATCHED_V1,
        ORDERS_MATCHED_V2,
    ];
    let (mut fills, mut errors) = (0, 0);
    for round in 0..20_000 {
        let mut log = if round % 2 == 0 {
            // Structured: a valid log with a few words replaced by random ones.
            let mut log = [v1_buy, v1_sell, v2_buy, v2_sell][rng.below(4)]();
            for _ in 0..rng.below(3) {
                let words = log.data.len() / 32;
                let i = rng.below(words as u64 + log.topics.len() as u64);
                if i < words {
                    log.data[i * 32..(i + 1) * 32].copy_from_slice(&rng.word());
                } else {
                    log.topics[i - words] = rng.word();
                }
            }
            if rng.below(8) == 0 {
                log.address = addr(emitters[rng.below(emitters.len() as u64)]);
            }
            log
        } else {
            // Unstructured: random emitter, topic count, topic0 and data length.
            let mut log = v1_buy();
            log.address = addr(emitters[rng.below(emitters.len() as u64)]);
            log.topics = (0..rng.below(6)).map(|_| rng.word()).collect();
            if !log.topics.is_empty() && rng.below(4) != 0 {
                log.topics[0] = topic0s[rng.below(4)];
            }
            let words = if rng.below(3) == 0 {
                rng.below(10)
            } else {
                [5, 7][rng.below(2)]
            };
            log.data = (0..words).flat_map(|_| rng.word()).collect();
            log
        };
        if rng.below(8) == 0 {
            log.data.truncate(rng.below(log.data.len() as u64 + 1));
        }
        match decode(&log, &allow) {
            Ok(Some(f)) => {
                fills += 1;
                assert!(!f.shares.is_zero());
                let _ = (f.price(), format_units6(f.collateral), format_units6(f.fee));
            }
            Ok(None) => {}
            Err(e) => {
                errors += 1;
                let _ = e.to_string();
            }
        }
    }
    assert!(
        fills > 100 && errors > 100,
        "fuzz reached both paths: {fills} fills, {errors} errors"
    );

    // Every truncation and every single-byte corruption of valid logs.
    for base in [v1_buy(), v1_sell(), v2_buy(), v2_sell()] {
        for len in 0..base.data.len() {
            let mut log = base.clone();
            log.data.truncate(len);
            assert!(decode(&log, &allow).is_err());
        }
        for i in 0..base.data.len() {
            let mut log = base.clone();
            log.data[i] ^= 0xff;
            let _ = decode(&log, &allow);
        }
    }
}
