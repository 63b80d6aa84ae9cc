//! Parsing what a request names: a wallet, a ledger cursor, a page size (each refused with the
//! status and code the API documents). Pure, shared by the routes.

use pmw_core::{Address, Cursor};

use crate::error::ApiError;

/// Parse a wallet address: 422 with the reason when it is not one.
pub fn parse_wallet(s: &str) -> Result<Address, ApiError> {
    s.parse::<Address>()
        .map_err(|e| ApiError::unprocessable("invalid_address", format!("{s:?}: {e}")))
}

/// Parse a cursor: 400 when it is not one.
pub fn parse_cursor(s: &str) -> Result<Cursor, ApiError> {
    s.parse::<Cursor>()
        .map_err(|e| ApiError::bad_request("invalid_cursor", format!("{s:?}: {e}")))
}

/// Check a page size: 422 outside `1..=max`.
pub fn check_limit(limit: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match limit.unwrap_or(default) {
        n if (1..=max).contains(&n) => Ok(n),
        n => Err(ApiError::unprocessable(
            "invalid_limit",
            format!("limit must be between 1 and {max}, got {n}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn a_page_size_defaults_and_stays_within_bounds() {
        assert_eq!(check_limit(None, 100, 1_000).unwrap(), 100);
        assert_eq!(check_limit(Some(1), 100, 1_000).unwrap(), 1);
        assert_eq!(check_limit(Some(1_000), 100, 1_000).unwrap(), 1_000);
        for n in [0, 1_001] {
            let e = check_limit(Some(n), 100, 1_000).unwrap_err();
            assert_eq!(
                (e.status, e.code),
                (StatusCode::UNPROCESSABLE_ENTITY, "invalid_limit")
            );
        }
    }

    #[test]
    fn cursors_and_wallets_are_refused_with_their_codes() {
        let c = parse_cursor("000081234567-000042").unwrap();
        assert_eq!((c.block, c.log_index), (81_234_567, 42));
        let e = parse_cursor("81234567").unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, "invalid_cursor")
        );
        let w = parse_wallet("0x1111111111111111111111111111111111111111").unwrap();
        assert_eq!(
            w.to_lower_hex(),
            "0x1111111111111111111111111111111111111111"
        );
        let e = parse_wallet("0x11").unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_address")
        );
    }
}
