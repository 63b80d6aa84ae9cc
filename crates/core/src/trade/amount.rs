//! Exact decimal rendering of 6-decimal token amounts and of prices (collateral / shares),
//! with integer arithmetic only: no floating point anywhere.

use primitive_types::{U256, U512};
use serde::{Deserialize, Serialize};

/// Decimals of Polymarket collateral (USDC.e, pUSD) and of outcome shares.
pub const AMOUNT_DECIMALS: u32 = 6;
/// Fractional digits a price is rendered with at most.
pub const PRICE_DECIMALS: u32 = 18;

/// A price (collateral per share) as a decimal string.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Price {
    /// Plain decimal, no exponent, no trailing zeros, at most 18 fractional digits ("0.52").
    pub text: String,
    /// `true` when `text` is the exact quotient; `false` when it was rounded half-up at the
    /// 18th fractional digit.
    pub exact: bool,
}

/// Render a 6-decimal base-unit amount: 1_500_000 → "1.5", 1 → "0.000001", 0 → "0".
pub fn format_units6(value: U256) -> String {
    format_fixed(U512::from(value), AMOUNT_DECIMALS)
}

/// `collateral / shares` (both in the same base units), exact when the quotient terminates
/// within 18 fractional digits, otherwise rounded half-up there. `None` when `shares` is zero.
pub fn price_of(collateral: U256, shares: U256) -> Option<Price> {
    if shares.is_zero() {
        return None;
    }
    let scale = U512::exp10(PRICE_DECIMALS as usize);
    let shares = U512::from(shares);
    // collateral < 2^256 and 10^18 < 2^60, so the product fits in 512 bits.
    let (mut scaled, rem) = (U512::from(collateral) * scale).div_mod(shares);
    let exact = rem.is_zero();
    // Half-up: round away when the remainder is at least half the divisor. rem < shares < 2^256,
    // so doubling it cannot overflow 512 bits.
    if !exact && rem * 2u32 >= shares {
        scaled += U512::one();
    }
    Some(Price {
        text: format_fixed(scaled, PRICE_DECIMALS),
        exact,
    })
}

/// Render `value / 10^decimals` as a plain decimal string without trailing zeros.
fn format_fixed(value: U512, decimals: u32) -> String {
    let (int_part, frac_part) = value.div_mod(U512::exp10(decimals as usize));
    let int_text = int_part.to_string();
    if frac_part.is_zero() {
        return int_text;
    }
    let frac_text = format!(
        "{:0>width$}",
        frac_part.to_string(),
        width = decimals as usize
    );
    format!("{int_text}.{}", frac_text.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(n: u128) -> U256 {
        U256::from(n)
    }

    fn price(c: U256, s: U256) -> (String, bool) {
        let p = price_of(c, s).expect("non-zero shares");
        (p.text, p.exact)
    }

    #[test]
    fn format_units6_cases() {
        assert_eq!(format_units6(u(0)), "0");
        assert_eq!(format_units6(u(1)), "0.000001");
        assert_eq!(format_units6(u(10)), "0.00001");
        assert_eq!(format_units6(u(1_500_000)), "1.5");
        assert_eq!(format_units6(u(1_000_000)), "1");
        assert_eq!(format_units6(u(520_000)), "0.52");
        assert_eq!(format_units6(u(17_700_000)), "17.7");
        assert_eq!(format_units6(u(123_456_789)), "123.456789");
        assert_eq!(format_units6(u(100_000_000_000)), "100000");
    }

    #[test]
    fn format_units6_beyond_u128() {
        assert_eq!(
            format_units6(U256::MAX),
            "115792089237316195423570985008687907853269984665640564039457584007913129.639935"
        );
        // 2^128 base units: one more than u128 can hold.
        let v = U256::from(u128::MAX) + U256::one();
        assert_eq!(format_units6(v), "340282366920938463463374607431768.211456");
    }

    #[test]
    fn exact_prices() {
        assert_eq!(price(u(520_000), u(1_000_000)), ("0.52".into(), true));
        assert_eq!(price(u(7_434_000), u(17_700_000)), ("0.42".into(), true));
        assert_eq!(price(u(1_000_000), u(1_000_000)), ("1".into(), true));
        assert_eq!(price(u(0), u(5)), ("0".into(), true));
        assert_eq!(price(u(1), u(8)), ("0.125".into(), true));
        // 2^-18 terminates at 18 digits exactly.
        assert_eq!(
            price(u(1), u(1 << 18)),
            ("0.000003814697265625".into(), true)
        );
        assert_eq!(price(u(3), u(2)), ("1.5".into(), true));
    }

    #[test]
    fn repeating_prices_round_half_up_at_18_digits() {
        assert_eq!(price(u(1), u(3)), ("0.333333333333333333".into(), false));
        assert_eq!(price(u(2), u(3)), ("0.666666666666666667".into(), false));
        assert_eq!(
            price(u(1_000_000), u(3_000_000)),
            ("0.333333333333333333".into(), false)
        );
        // 1/7 = 0.142857142857142857|142… rounds down.
        assert_eq!(price(u(1), u(7)), ("0.142857142857142857".into(), false));
        // 2^-19 = 0.0000019073486328125: the 19th digit is exactly 5 → half rounds up.
        assert_eq!(
            price(u(1), u(1 << 19)),
            ("0.000001907348632813".into(), false)
        );
        // Rounding carries into the integer part: (10^18·2 − 1)/(2·10^18) = 0.99999…95.
        let s = u(2_000_000_000_000_000_000);
        assert_eq!(price(s - u(1), s), ("1".into(), false));
        // A value that rounds to 0 at 18 digits is still not exact.
        assert_eq!(
            price(u(1), u(3_000_000_000_000_000_000)),
            ("0".into(), false)
        );
    }

    #[test]
    fn prices_beyond_u128() {
        let big = U256::MAX;
        assert_eq!(price(big, big), ("1".into(), true));
        assert_eq!(
            price(big, u(1)),
            (
                "115792089237316195423570985008687907853269984665640564039457584007913129639935"
                    .into(),
                true
            )
        );
        assert_eq!(price(u(1), big).0, "0");
        // (2^255) / (2^256 − 1) ≈ 0.5000000000000…, just above one half.
        let half = U256::one() << 255;
        assert_eq!(price(half, big), ("0.5".into(), false));
        assert!(price_of(u(5), U256::zero()).is_none());
    }
}
