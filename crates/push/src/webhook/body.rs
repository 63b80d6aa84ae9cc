//! The body of one attempt, from the stored (or handed) payload text: its top-level
//! `t_push_ms` set to the send time without a parse, and top-level keys found in either
//! rendering (Postgres' `jsonb` text or the webhook lane's compact one).

/// Where the value of top-level `key` lies in a stored payload: after `"key": ` (as Postgres
/// renders jsonb) or `"key":` (as the webhook lane rendered it, handed over), up to the next
/// `,` or `}`. Inside a JSON string the quotes would be escaped, so only a key matches.
pub(crate) fn value_of(payload: &str, key: &str) -> Option<std::ops::Range<usize>> {
    let quoted = format!("\"{key}\":");
    let at = payload.find(&quoted)? + quoted.len();
    let start = at + usize::from(payload[at..].starts_with(' '));
    let end = payload[start..]
        .find([',', '}'])
        .map_or(payload.len(), |n| start + n);
    Some(start..end)
}

/// Whether the payload is a fill found by the completeness audit (`"audit": true`).
pub(crate) fn is_audit(payload: &str) -> bool {
    value_of(payload, "audit").is_some_and(|v| &payload[v] == "true")
}

/// The top-level `pending_id` of a stored payload (a `pending`'s fill, or the one a `trade`
/// confirmed); 0 when it has none.
pub(crate) fn pending_id(payload: &str) -> u64 {
    value_of(payload, "pending_id").map_or(0, |v| payload[v].trim().parse().unwrap_or(0))
}

/// The body of this attempt: the payload with its top-level `t_push_ms` set to now, spliced
/// into the text ([`value_of`]): no parse, no re-serialisation. A payload without that key
/// (not queued by pmw) goes through serde_json, which adds it to an object.
pub(crate) fn body(payload: &str, now: i64) -> Result<Vec<u8>, String> {
    if let Some(v) = value_of(payload, "t_push_ms") {
        let digits = &payload[v.clone()];
        if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == '-') {
            let mut out = Vec::with_capacity(payload.len() + 8);
            out.extend_from_slice(&payload.as_bytes()[..v.start]);
            out.extend_from_slice(now.to_string().as_bytes());
            out.extend_from_slice(&payload.as_bytes()[v.end..]);
            return Ok(out);
        }
    }
    let mut p: serde_json::Value =
        serde_json::from_str(payload).map_err(|e| format!("payload: {e}"))?;
    if let Some(obj) = p.as_object_mut() {
        obj.insert("t_push_ms".into(), now.into());
    }
    serde_json::to_vec(&p).map_err(|e| format!("payload: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attempt_body_sets_t_push_ms_in_the_stored_text() {
        let stored = r#"{"type": "trade", "t_push_ms": 5, "note": "x\"t_push_ms\": 7", "n": 1}"#;
        let out: serde_json::Value = serde_json::from_slice(&body(stored, 1234).unwrap()).unwrap();
        assert_eq!(out["t_push_ms"], 1234);
        assert_eq!(out["note"], "x\"t_push_ms\": 7");
        assert_eq!(out["n"], 1);
        // Without the key: added through serde_json.
        let out: serde_json::Value =
            serde_json::from_slice(&body(r#"{"type": "retract"}"#, 9).unwrap()).unwrap();
        assert_eq!(out["t_push_ms"], 9);
        assert!(body("not json", 1).is_err());
        // As the webhook lane renders it (handed over without a trip through Postgres).
        let lane = pmw_core::message::stamp(
            pmw_core::message::Kind::Trade,
            r#"{"note":"\"t_push_ms\":7","n":2}"#,
            5,
        );
        let out: serde_json::Value = serde_json::from_slice(&body(&lane, 4321).unwrap()).unwrap();
        assert_eq!(out["t_push_ms"], 4321);
        assert_eq!(out["type"], "trade");
        assert_eq!(out["note"], "\"t_push_ms\":7");
        assert_eq!(out["n"], 2);
        // The audit flag, in either rendering; a key inside a string is not a key.
        for (payload, want) in [
            (r#"{"type": "trade", "audit": true, "n": 1}"#, Some("true")),
            (r#"{"type":"trade","audit":false}"#, Some("false")),
            (r#"{"note":"\"audit\":true"}"#, None),
        ] {
            assert_eq!(
                value_of(payload, "audit").map(|v| &payload[v]),
                want,
                "{payload}"
            );
            assert_eq!(is_audit(payload), want == Some("true"), "{payload}");
        }
    }
}
