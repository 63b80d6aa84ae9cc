//! Index validity in `pmwctl status`: every index of pmw's schema that Postgres does not use or
//! does not maintain (`pg_index.indisvalid` / `indisready` false, core's one query), as JSON and
//! as warnings.

use pmw_core::exit::ServiceError;
use pmw_core::pg::indexes::{broken_indexes, BrokenIndex};
use serde_json::Value;

use crate::conn::db_error;

/// The broken indexes (an empty list when every index is valid and ready).
pub async fn collect(c: &tokio_postgres::Client) -> Result<Vec<BrokenIndex>, ServiceError> {
    broken_indexes(c).await.map_err(db_error)
}

/// The JSON of `broken`.
pub fn json(broken: &[BrokenIndex]) -> Value {
    serde_json::to_value(broken).unwrap_or(Value::Null)
}

/// One warning per broken index.
pub fn warnings(broken: &[BrokenIndex]) -> Vec<String> {
    broken.iter().map(BrokenIndex::warning).collect()
}

/// The text line: `indexes       all valid and ready`, or how many are not.
pub fn text(v: &Value) -> String {
    match v.as_array().map(Vec::len) {
        Some(0) => "indexes       all valid and ready".into(),
        Some(n) => {
            let names: Vec<&str> = v
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["index"].as_str())
                .collect();
            format!(
                "indexes       {n} not valid or not ready: {} (see warnings)",
                names.join(", ")
            )
        }
        None => "indexes       unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_broken_indexes() {
        assert_eq!(text(&json(&[])), "indexes       all valid and ready");
        let b = BrokenIndex {
            index: "x_u".into(),
            table: "x".into(),
            valid: false,
            ready: true,
            unique: true,
            definition: "CREATE UNIQUE INDEX x_u ON public.x (a)".into(),
        };
        let v = json(std::slice::from_ref(&b));
        assert_eq!(v[0]["valid"], false);
        assert_eq!(
            text(&v),
            "indexes       1 not valid or not ready: x_u (see warnings)"
        );
        assert_eq!(warnings(std::slice::from_ref(&b)), [b.warning()]);
    }
}
