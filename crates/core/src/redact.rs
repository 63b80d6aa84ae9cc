//! The one place secrets are taken out of what is logged or stored for display: a URL is shown
//! as `scheme://host[:port]` (its user info, path, query and fragment, where RPC keys, database
//! passwords and webhook tokens live, are dropped), and error text that may embed URLs (reqwest's
//! and ethers' errors name the URL they failed on) has every URL in it cut down the same way.
//!
//! Use [`url`]/[`Url`] for a URL field, [`text`]/[`Scrubbed`] for an error that may embed one
//! (stored or shown), and [`reqwest_error`] on a `reqwest::Error` before it is kept; every log
//! line also passes through [`Writer`] (services' logging, [`crate::telemetry`]).

use std::fmt;
use std::io;

/// What a secret field's `Debug` shows.
pub const HIDDEN: &str = "[redacted]";

/// What a URL that does not parse is shown as.
const UNPARSEABLE: &str = "[redacted url]";

/// `scheme://host[:port]` of `raw`: no user info, path, query or fragment.
pub fn url(raw: &str) -> String {
    let Ok(parsed) = ::url::Url::parse(raw.trim()) else {
        return match raw.split_once("://") {
            Some((scheme, _)) if is_scheme(scheme) => format!("{scheme}://{UNPARSEABLE}"),
            _ => UNPARSEABLE.into(),
        };
    };
    let host = parsed.host_str().unwrap_or("");
    match parsed.port() {
        Some(port) => format!("{}://{host}:{port}", parsed.scheme()),
        None => format!("{}://{host}", parsed.scheme()),
    }
}

/// `text` with every URL in it (`scheme://…` up to a space or quote) replaced by [`url`] of it.
pub fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find("://") {
        let scheme_start = scheme_start(&rest[..found]);
        if scheme_start == found {
            // `://` without a scheme before it: not a URL; keep it and look further.
            out.push_str(&rest[..found + 3]);
            rest = &rest[found + 3..];
            continue;
        }
        let before = &rest[..scheme_start];
        let end = url_end(before, &rest[scheme_start..]);
        out.push_str(before);
        out.push_str(&url(&rest[scheme_start..scheme_start + end]));
        rest = &rest[scheme_start + end..];
    }
    out.push_str(rest);
    out
}

/// A `reqwest::Error` whose URL keeps only `scheme://host[:port]/` (its `Display` names it).
pub fn reqwest_error(mut e: reqwest::Error) -> reqwest::Error {
    if let Some(u) = e.url_mut() {
        let _ = u.set_username("");
        let _ = u.set_password(None);
        u.set_path("");
        u.set_query(None);
        u.set_fragment(None);
    }
    e
}

/// A URL for a log field: `url = %Url(&endpoint.url)` shows [`url`] of it.
pub struct Url<'a>(pub &'a str);

impl fmt::Display for Url<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&url(self.0))
    }
}

impl fmt::Debug for Url<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", url(self.0))
    }
}

/// An error for a log field: `error = %Scrubbed(&e)` shows [`text`] of its `Display`.
pub struct Scrubbed<T>(pub T);

impl<T: fmt::Display> fmt::Display for Scrubbed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&text(&self.0.to_string()))
    }
}

/// A log writer that passes every line through [`text`] (the last net under every call site:
/// libraries log URLs too, e.g. ethers' WebSocket reconnects). The formatter writes each event
/// in one call, so a URL is never split between writes.
pub struct Writer<W>(pub W);

impl<W: io::Write> io::Write for Writer<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(s) if s.contains("://") => self.0.write_all(text(s).as_bytes())?,
            _ => self.0.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

fn is_scheme(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Where the scheme ending `head` starts (`head.len()` when none does).
fn scheme_start(head: &str) -> usize {
    let run = head
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        .last()
        .map_or(head.len(), |(i, _)| i);
    // A scheme starts with a letter: skip leading digits and signs of the run.
    head[run..]
        .char_indices()
        .find(|(_, c)| c.is_ascii_alphabetic())
        .map_or(head.len(), |(i, _)| run + i)
}

/// The length of the URL at the start of `tail`: up to whitespace, a double quote, `<`, `>` or a
/// backtick; when `before` opens it with `(`, `[`, `{` or `'`, up to the last matching closer;
/// trailing sentence punctuation is left out. Erring long only hides more text.
fn url_end(before: &str, tail: &str) -> usize {
    let mut end = tail
        .find(|c: char| c.is_whitespace() || matches!(c, '"' | '<' | '>' | '`'))
        .unwrap_or(tail.len());
    let closer = match before.chars().last() {
        Some('(') => Some(')'),
        Some('[') => Some(']'),
        Some('{') => Some('}'),
        Some('\'') => Some('\''),
        _ => None,
    };
    if let Some(at) = closer.and_then(|c| tail[..end].rfind(c)) {
        end = at;
    }
    let kept = tail[..end].trim_end_matches(['.', ',', ';', ':', '!']);
    kept.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_keeps_scheme_host_and_port_only() {
        for (raw, shown) in [
            (
                "https://hooks.example/in?token=abc",
                "https://hooks.example",
            ),
            (
                "http://u:pw@127.0.0.1:8080/p/a/t/h#frag",
                "http://127.0.0.1:8080",
            ),
            (
                "postgres://pmw:hunter2@db.internal:5432/pmw",
                "postgres://db.internal:5432",
            ),
            (
                "wss://polygon.example/v2/rpc-key-abc",
                "wss://polygon.example",
            ),
            ("http://[::1]:9/x", "http://[::1]:9"),
            ("http://127.0.0.1:58123", "http://127.0.0.1:58123"),
            ("http://host:notaport/secret", "http://[redacted url]"),
            ("not a url secret", "[redacted url]"),
        ] {
            assert_eq!(url(raw), shown, "{raw}");
            assert_eq!(Url(raw).to_string(), shown, "{raw}");
        }
    }

    #[test]
    fn every_url_in_a_text_is_cut_down_and_the_rest_kept() {
        for (raw, shown) in [
            (
                "rpc: error sending request for url (http://127.0.0.1:1/?key=SECRET): connection refused",
                "rpc: error sending request for url (http://127.0.0.1:1): connection refused",
            ),
            (
                "a ws://u:SECRET@h:2/p and https://x.example/SECRET. done",
                "a ws://h:2 and https://x.example. done",
            ),
            (
                "{\"url\":\"https://h/SECRET\"}",
                "{\"url\":\"https://h\"}",
            ),
            ("'http://h/a)b?k=SECRET'", "'http://h'"),
            ("(http://h/a)b?k=SECRET)", "(http://h)"),
            ("no url :// here 1://x", "no url :// here 1://x"),
            ("plain", "plain"),
        ] {
            let got = text(raw);
            assert_eq!(got, shown, "{raw}");
            assert!(!got.contains("SECRET"), "{got}");
        }
    }

    #[test]
    fn a_scrubbed_error_shows_no_url_path() {
        let e = std::io::Error::other("for url (http://h:1/SECRET)");
        assert_eq!(Scrubbed(&e).to_string(), "for url (http://h:1)");
    }

    #[test]
    fn the_log_writer_scrubs_each_line() {
        use std::io::Write;
        let mut w = Writer(Vec::new());
        w.write_all(b"INFO reconnecting url=\"ws://h:1/?key=SECRET\"\n")
            .unwrap();
        w.write_all(b"plain line\n").unwrap();
        let out = String::from_utf8(w.0).unwrap();
        assert_eq!(out, "INFO reconnecting url=\"ws://h:1\"\nplain line\n");
    }

    #[test]
    fn structs_holding_secrets_debug_without_them() {
        let key = crate::pg::accounts::NewKey {
            key: "pmw_SECRET".into(),
            prefix: "pmw_1".into(),
            label: String::new(),
            account_id: 1,
            created_ms: 0,
        };
        let target = crate::pg::deliveries::EndpointTarget {
            id: 1,
            account_id: 1,
            url: "https://hooks.example/in/SECRET?token=SECRET".into(),
            signing: crate::webhook::Signing::parse(1, "whsec_SECRET", None, None),
            failing_since_ms: None,
            chat: Some(crate::chat::ChatTarget {
                kind: crate::chat::ChatKind::Telegram,
                url: Some("https://api.example/SECRET".into()),
                token: Some("1:SECRET".into()),
                chat_id: Some("-100".into()),
            }),
        };
        for shown in [format!("{key:?}"), format!("{target:?}")] {
            assert!(!shown.contains("SECRET"), "{shown}");
        }
    }

    #[tokio::test]
    async fn a_reqwest_error_keeps_the_host_and_drops_the_rest() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Nothing listens on the port any more: the request fails, naming its URL.
        let e = reqwest::get(format!(
            "http://u:pw@127.0.0.1:{port}/SECRET?k=SECRET#SECRET"
        ))
        .await
        .unwrap_err();
        assert!(
            e.to_string().contains("SECRET"),
            "reqwest names the URL: {e}"
        );
        let shown = reqwest_error(e).to_string();
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    }
}
