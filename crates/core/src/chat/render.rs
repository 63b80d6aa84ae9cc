//! Readable chat messages from `trade` and `retract` bodies, in each service's documented
//! request format: Discord execute-webhook (`content` plus one embed), Slack incoming webhook
//! (`text` plus a `section` block, mrkdwn) and Telegram `sendMessage` (`chat_id`, `text`,
//! `parse_mode: HTML`). One alert renders as a short card; several (what was pending when the
//! endpoint could send again, e.g. after a rate limit) as one digest with a line per alert.
//! A market not resolved yet reads "market pending": nothing here waits for a name.

use serde_json::{json, Value};

use super::{ChatKind, ChatTarget};
use crate::message::{Kind, TradeMessage};
use crate::UnixMs;

/// Alerts one message carries at most (each service caps a message's length).
pub const DIGEST_MAX: usize = 10;
/// What a line says for a market the resolver has not named yet.
pub const PENDING: &str = "market pending";

/// One trade (or its retract) to tell a chat about, with the subscriber's label of its wallet.
#[derive(Debug, Clone)]
pub struct Alert {
    pub kind: Kind,
    pub msg: TradeMessage,
    /// The account's label for the wallet (`subscriptions.label`), when it has one.
    pub label: Option<String>,
}

/// The request body posting `alerts` (at least one) to `target`.
pub fn body(target: &ChatTarget, alerts: &[Alert]) -> Value {
    let m = Markup(target.kind);
    let text = text(m, alerts);
    match target.kind {
        ChatKind::Discord => {
            let a = &alerts[0];
            let mut v = json!({
                "content": clip(&text, 2000),
                "allowed_mentions": {"parse": []},
            });
            if alerts.len() == 1 {
                v["embeds"] = json!([{
                    "title": clip(&title(a), 256),
                    "url": link(a),
                    "timestamp": UnixMs(a.msg.trade.block_time_ms).to_rfc3339(),
                }]);
            }
            v
        }
        ChatKind::Slack => json!({
            "text": text,
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": clip(&text, 3000)}}],
        }),
        ChatKind::Telegram => json!({
            "chat_id": target.chat_id,
            "text": clip(&text, 4096),
            "parse_mode": "HTML",
            "disable_web_page_preview": true,
        }),
    }
}

/// The message text: a card for one alert, a digest for several.
fn text(m: Markup, alerts: &[Alert]) -> String {
    if let [a] = alerts {
        return card(m, a);
    }
    let mut out = m.bold(&format!(
        "{} alerts (held back while the destination was busy or rate-limited)",
        alerts.len()
    ));
    for a in alerts {
        out.push_str("\n• ");
        out.push_str(&line(m, a));
    }
    out
}

/// One alert as three lines: what happened, which market, who and when.
fn card(m: Markup, a: &Alert) -> String {
    let t = &a.msg.trade;
    let what = format!(
        "{} {} shares of {} at {} ({} USDC)",
        m.bold(&t.side),
        num(&t.shares),
        m.bold(&m.esc(&outcome(a))),
        num(&t.price),
        num(&t.collateral)
    );
    let first = match a.kind {
        Kind::Retract => format!("↩️ Trade reverted by a reorg: {what}"),
        _ => what,
    };
    format!(
        "{first}\n{} · {}\n{} · {}",
        m.esc(&title(a)),
        m.link("market", &link(a)),
        m.esc(&wallet(a)),
        time(t.block_time_ms)
    )
}

/// One alert as one digest line.
fn line(m: Markup, a: &Alert) -> String {
    let t = &a.msg.trade;
    let what = format!(
        "{} {} {} at {} ({} USDC) · {} · {} · {} · {}",
        m.bold(&t.side),
        num(&t.shares),
        m.esc(&outcome(a)),
        num(&t.price),
        num(&t.collateral),
        m.esc(&clip(&title(a), 90)),
        m.esc(&wallet(a)),
        time(t.block_time_ms),
        m.link("market", &link(a))
    );
    match a.kind {
        Kind::Retract => format!("↩️ reverted by a reorg: {what}"),
        _ => what,
    }
}

/// The market's title (its question), or [`PENDING`].
pub fn title(a: &Alert) -> String {
    market_field(a, |m| m.question.clone()).unwrap_or_else(|| PENDING.into())
}

fn outcome(a: &Alert) -> String {
    market_field(a, |m| m.outcome.clone()).unwrap_or_else(|| "?".into())
}

fn market_field(
    a: &Alert,
    f: impl Fn(&crate::message::Market) -> Option<String>,
) -> Option<String> {
    a.msg.market.as_ref().and_then(f).filter(|s| !s.is_empty())
}

/// The market on Polymarket (its event, else the market's slug); the transaction on
/// Polygonscan while the market is pending.
pub fn link(a: &Alert) -> String {
    if let Some(e) = market_field(a, |m| m.event_slug.clone()) {
        return format!("https://polymarket.com/event/{e}");
    }
    if let Some(s) = market_field(a, |m| m.slug.clone()) {
        return format!("https://polymarket.com/market/{s}");
    }
    format!("https://polygonscan.com/tx/{}", a.msg.trade.tx_hash)
}

/// The wallet's label with its short address, or the short address.
fn wallet(a: &Alert) -> String {
    let w = &a.msg.trade.wallet;
    let short = if w.len() > 12 {
        format!("{}…{}", &w[..6], &w[w.len() - 4..])
    } else {
        w.clone()
    };
    match a.label.as_deref().filter(|l| !l.trim().is_empty()) {
        Some(l) => format!("{} ({short})", l.trim()),
        None => short,
    }
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// A decimal without trailing zeros (`12.500000` → `12.5`).
fn num(s: &str) -> String {
    if !s.contains('.') {
        return s.to_string();
    }
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// At most `max` characters, with `…` when cut.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// Each service's markup: escaping, bold and links.
#[derive(Clone, Copy)]
struct Markup(ChatKind);

impl Markup {
    fn esc(self, s: &str) -> String {
        match self.0 {
            ChatKind::Discord => {
                let mut out = String::with_capacity(s.len());
                for c in s.chars() {
                    if matches!(c, '*' | '_' | '~' | '`' | '|' | '[' | ']') {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out
            }
            ChatKind::Slack | ChatKind::Telegram => s
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;"),
        }
    }

    fn bold(self, s: &str) -> String {
        match self.0 {
            ChatKind::Discord => format!("**{s}**"),
            ChatKind::Slack => format!("*{s}*"),
            ChatKind::Telegram => format!("<b>{s}</b>"),
        }
    }

    fn link(self, label: &str, url: &str) -> String {
        match self.0 {
            ChatKind::Discord => format!("[{label}](<{url}>)"),
            ChatKind::Slack => format!("<{url}|{label}>"),
            ChatKind::Telegram => format!("<a href=\"{}\">{label}</a>", url.replace('"', "%22")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Market;

    fn alert(named: bool) -> Alert {
        let row = crate::ch::TradeRow {
            block_number: 12,
            log_index: 3,
            block_hash: "0xaabbccdd".into(),
            tx_hash: "0xfeed".into(),
            block_time_ms: 1_700_000_000_000,
            exchange: "0xcc".into(),
            exchange_version: 2,
            order_hash: "0xdd".into(),
            maker: "0x1111222233334444555566667777888899990000".into(),
            taker: "0x22".into(),
            side: 0,
            token_id: "99".into(),
            shares: "120.500000".into(),
            collateral: "62.660000".into(),
            price: "0.520000".into(),
            fee: "0".into(),
            fee_asset: "collateral".into(),
            t_detect_ms: 5,
            backfilled: 0,
            retracted: 0,
            version: 1,
            audit: 0,
        };
        let market = named.then(|| Market {
            question: Some("Will it <rain>?".into()),
            outcome: Some("Yes".into()),
            slug: Some("will-it-rain".into()),
            event_slug: Some("weather".into()),
            condition_id: None,
        });
        Alert {
            kind: Kind::Trade,
            msg: TradeMessage::from_row(&row, market.as_ref()),
            label: Some("Whale".into()),
        }
    }

    fn target(kind: ChatKind) -> ChatTarget {
        ChatTarget {
            kind,
            url: None,
            token: None,
            chat_id: Some("-100".into()),
        }
    }

    #[test]
    fn one_trade_reads_as_a_card_in_each_services_format() {
        let d = body(&target(ChatKind::Discord), &[alert(true)]);
        let c = d["content"].as_str().unwrap();
        assert!(
            c.contains("**BUY** 120.5 shares of **Yes** at 0.52 (62.66 USDC)"),
            "{c}"
        );
        assert!(
            c.contains("Will it <rain>?") && c.contains("Whale (0x1111…0000)"),
            "{c}"
        );
        assert!(c.contains("2023-11-14 22:13:20 UTC"), "{c}");
        assert_eq!(
            d["embeds"][0]["url"],
            "https://polymarket.com/event/weather"
        );
        let s = body(&target(ChatKind::Slack), &[alert(true)]);
        assert!(s["text"]
            .as_str()
            .unwrap()
            .contains("Will it &lt;rain&gt;?"));
        assert_eq!(s["blocks"][0]["text"]["type"], "mrkdwn");
        let t = body(&target(ChatKind::Telegram), &[alert(false)]);
        assert_eq!(t["chat_id"], "-100");
        assert_eq!(t["parse_mode"], "HTML");
        let tt = t["text"].as_str().unwrap();
        assert!(
            tt.contains(PENDING) && tt.contains("polygonscan.com/tx/0xfeed"),
            "{tt}"
        );
    }

    #[test]
    fn several_alerts_fold_into_one_digest_with_a_line_each() {
        let mut r = alert(true);
        r.kind = Kind::Retract;
        let d = body(&target(ChatKind::Discord), &[alert(true), alert(false), r]);
        let c = d["content"].as_str().unwrap();
        assert!(c.starts_with("**3 alerts"), "{c}");
        assert_eq!(c.matches("\n• ").count(), 3, "{c}");
        assert!(
            c.contains("reverted by a reorg") && c.contains(PENDING),
            "{c}"
        );
        assert!(d.get("embeds").is_none());
    }
}
