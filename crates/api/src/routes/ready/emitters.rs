//! The unlisted emitters check: contracts outside pmw-live's exchange list that emitted a
//! Polymarket fill or match event (`unlisted_emitters`, core's one query). Reported in
//! `warnings`, never gating: their logs are never delivered (anyone can emit a look-alike),
//! but one may be a new Polymarket exchange whose fills pmw misses until an operator lists it.

use pmw_core::pg::emitters::{open, warning, WARN_NAMED};
use serde_json::{json, Value};

use super::probe::bounded;
use super::Check;
use crate::AppState;

/// Pass with `{"count": 0, "emitters": []}`; fail with the warning, the count and the most
/// recently seen ones.
pub async fn unlisted_emitters(st: &AppState) -> Check {
    let found = bounded(async {
        let c = st.ready_pg.get().await.map_err(|e| e.to_string())?;
        open(&**c, WARN_NAMED as i64)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    match found {
        Err(e) => Check::fail(format!("unlisted emitters unknown: {e}"), Value::Null),
        Ok((list, total)) => {
            let detail = json!({ "count": total, "emitters": list });
            match warning(&list, total) {
                None => Check::pass(detail),
                Some(w) => Check::fail(w, detail),
            }
        }
    }
}
