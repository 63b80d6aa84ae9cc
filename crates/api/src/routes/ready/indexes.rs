//! The index check: every index of pmw's schema is valid and ready (`pg_index`, core's one
//! query). Reported in `warnings`, never gating: the push path works, but a lookup may be slow
//! or a UNIQUE index enforce nothing until it is rebuilt.

use pmw_core::pg::indexes::broken_indexes;
use serde_json::{json, Value};

use super::probe::bounded;
use super::Check;
use crate::AppState;

/// Pass with `{"broken": []}`; fail with one reason per broken index (joined) and the list.
pub async fn indexes(st: &AppState) -> Check {
    let found = bounded(async {
        let c = st.ready_pg.get().await.map_err(|e| e.to_string())?;
        broken_indexes(&**c).await.map_err(|e| e.to_string())
    })
    .await;
    match found {
        Err(e) => Check::fail(format!("index validity unknown: {e}"), Value::Null),
        Ok(broken) if broken.is_empty() => Check::pass(json!({ "broken": [] })),
        Ok(broken) => {
            let reasons: Vec<String> = broken.iter().map(|b| b.warning()).collect();
            Check::fail(reasons.join("; "), json!({ "broken": broken }))
        }
    }
}
