//! Unit tests of filter parsing, canonical form and matching.

use super::*;

const COND: &str = "0x5F65177B394277FD294CD75650044E32BA009A95022D88A0C1D565897D72F8F1";

fn spec(v: serde_json::Value) -> FilterSpec {
    serde_json::from_value(v).expect("a spec")
}

fn parse(v: serde_json::Value) -> Result<Option<Filter>, FilterError> {
    Filter::parse(&spec(v))
}

fn facts(side: Side, shares: &str, collateral: &str, token: &str, cond: Option<&str>) -> Facts {
    Facts {
        side,
        shares: trade_micro(shares),
        collateral: trade_micro(collateral),
        token_id: token.into(),
        condition_id: cond.map(str::to_ascii_lowercase),
    }
}

#[test]
fn amounts_parse_exactly_into_micro_units() {
    assert_eq!(parse_micro("0"), Some(0));
    assert_eq!(parse_micro("12.5"), Some(12_500_000));
    assert_eq!(parse_micro("0.000001"), Some(1));
    assert_eq!(parse_micro("007.100000"), Some(7_100_000));
    assert_eq!(
        parse_micro(&"9".repeat(30)),
        Some(999_999_999_999_999_999_999_999_999_999_000_000)
    );
    for bad in [
        "",
        ".5",
        "5.",
        "1.0000001",
        "-1",
        "+1",
        "1e3",
        " 1",
        "1 ",
        "1,5",
        "0x10",
        "NaN",
        "1.2.3",
        "١",
        "1.5\n",
    ] {
        assert_eq!(parse_micro(bad), None, "{bad:?}");
    }
    assert_eq!(parse_micro(&"9".repeat(31)), None);
    assert_eq!(format_micro(12_500_000), "12.5");
    assert_eq!(format_micro(1), "0.000001");
    assert_eq!(format_micro(0), "0");
    assert_eq!(format_micro(100_000_000), "100");
}

#[test]
fn trade_amounts_saturate_and_never_use_floats() {
    assert_eq!(trade_micro("1.04"), 1_040_000);
    assert_eq!(trade_micro("2"), 2_000_000);
    // 0.1 + 0.2 style: exact in micro-units.
    assert_eq!(trade_micro("0.3"), trade_micro("0.1") + trade_micro("0.2"));
    // A uint256-sized amount is above every minimum.
    assert_eq!(trade_micro(&"9".repeat(72)), u128::MAX);
    assert_eq!(trade_micro("garbage"), 0);
}

#[test]
fn minimums_compare_exactly_at_the_boundary() {
    let f = parse(serde_json::json!({"min_collateral": "12.5", "min_shares": "0.000002"}))
        .unwrap()
        .unwrap();
    let at = facts(Side::Buy, "0.000002", "12.5", "1", None);
    assert!(f.matches(&at), "equal to the minimum passes");
    assert!(!f.matches(&facts(Side::Buy, "0.000002", "12.499999", "1", None)));
    assert!(!f.matches(&facts(Side::Buy, "0.000001", "12.5", "1", None)));
    assert!(f.matches(&facts(Side::Sell, "1", "12.500001", "1", None)));
    // "12.50" and "12.5" are the same minimum; a float would also call 12.4999999999 close.
    let g = parse(serde_json::json!({"min_collateral": "12.50"}))
        .unwrap()
        .unwrap();
    assert_eq!(
        g,
        parse(serde_json::json!({"min_collateral": "12.5"}))
            .unwrap()
            .unwrap()
    );
    assert_eq!(g.spec().min_collateral.as_deref(), Some("12.5"));
}

#[test]
fn side_is_the_wallets_side() {
    let buy = parse(serde_json::json!({"side": "BUY"})).unwrap().unwrap();
    assert!(buy.matches(&facts(Side::Buy, "1", "1", "1", None)));
    assert!(!buy.matches(&facts(Side::Sell, "1", "1", "1", None)));
    for bad in ["buy", "Buy", "BOTH", ""] {
        assert_eq!(
            parse(serde_json::json!({ "side": bad })),
            Err(FilterError::Side(bad.into()))
        );
    }
}

#[test]
fn markets_match_by_token_or_by_a_resolved_condition() {
    let f = parse(serde_json::json!({"markets": [COND, "00042"]}))
        .unwrap()
        .unwrap();
    assert_eq!(
        f.spec().markets.unwrap(),
        vec![COND.to_ascii_lowercase(), "42".to_string()]
    );
    assert!(f.matches(&facts(Side::Buy, "1", "1", "42", None)));
    assert!(f.matches(&facts(Side::Buy, "1", "1", "7", Some(COND))));
    // An unresolved market never matches on its condition id.
    assert!(!f.matches(&facts(Side::Buy, "1", "1", "7", None)));
    assert!(!f.matches(&facts(
        Side::Buy,
        "1",
        "1",
        "420",
        Some(&format!("0x{}", "1".repeat(64)))
    )));
    for bad in [
        "0x1234",
        &format!("0x{}", "g".repeat(64)),
        &format!("0X{}", "1".repeat(64)),
        "",
        "-1",
        &"1".repeat(79),
        " 42",
    ] {
        assert_eq!(
            parse(serde_json::json!({ "markets": [bad] })),
            Err(FilterError::Market(bad.to_string())),
            "{bad:?}"
        );
    }
    assert_eq!(
        parse(serde_json::json!({ "markets": [] })),
        Err(FilterError::MarketCount(0))
    );
    let many: Vec<String> = (0..=MAX_MARKETS).map(|i| i.to_string()).collect();
    assert_eq!(
        parse(serde_json::json!({ "markets": many })),
        Err(FilterError::MarketCount(MAX_MARKETS + 1))
    );
}

#[test]
fn every_condition_must_hold_and_an_empty_filter_is_none() {
    assert_eq!(parse(serde_json::json!({})), Ok(None));
    assert_eq!(parse(serde_json::json!({"side": null})), Ok(None));
    let f = parse(serde_json::json!({"side": "SELL", "min_shares": "10", "markets": ["5"]}))
        .unwrap()
        .unwrap();
    assert!(f.matches(&facts(Side::Sell, "10", "0", "5", None)));
    assert!(!f.matches(&facts(Side::Buy, "10", "0", "5", None)));
    assert!(!f.matches(&facts(Side::Sell, "9.999999", "0", "5", None)));
    assert!(!f.matches(&facts(Side::Sell, "10", "0", "6", None)));
    assert!(passes(None, &facts(Side::Buy, "0", "0", "1", None)));
    assert!(!passes(Some(&f), &facts(Side::Buy, "0", "0", "1", None)));
}

#[test]
fn unknown_fields_are_refused_and_stored_filters_round_trip() {
    assert!(serde_json::from_value::<FilterSpec>(serde_json::json!({"sides": "BUY"})).is_err());
    assert!(serde_json::from_value::<FilterSpec>(serde_json::json!({"min_shares": 5})).is_err());
    assert!(serde_json::from_value::<FilterSpec>(serde_json::json!([null, "1"])).is_err());
    assert!(serde_json::from_value::<FilterSpec>(serde_json::json!([])).is_err());
    let f = parse(serde_json::json!({"side": "BUY", "min_collateral": "0.5", "markets": [COND]}))
        .unwrap()
        .unwrap();
    let stored = serde_json::to_string(&f.spec()).unwrap();
    assert_eq!(Filter::from_stored(&stored), Some(f));
    // A broken stored filter narrows to nothing rather than widening to everything.
    let broken = Filter::from_stored(r#"{"side":"UP"}"#).unwrap();
    assert!(!broken.matches(&facts(Side::Buy, "1", "1", "1", None)));
}
