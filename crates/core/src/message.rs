//! The messages pmw sends subscribers, one typed definition for every path: WebSocket frames,
//! webhook bodies, `GET /v1/trades`, replays and `pmwctl decode-log`. A `trade` (or `retract`)
//! is a [`TradeMessage`]; the control frames are [`Control`]. [`stamp`] puts `type` and
//! `t_push_ms` in front of a body rendered once per round, without re-serialising it per send.

use serde::{Deserialize, Serialize};

use crate::ch::TradeRow;
use crate::Position;

crate::ch::trades::fill_struct! {
    /// The fill itself. Amounts are exact decimal strings (6 decimals applied).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
    pub struct Trade {
        /// The wallet that owns the fill (its maker).
        pub wallet: String,
    }
    /// `BUY` or `SELL`, from the wallet's point of view.
    side: String,
}

impl Trade {
    /// The fill of a stored row.
    pub fn from_row(row: &TradeRow) -> Trade {
        Trade {
            wallet: row.maker.clone(),
            block_number: row.block_number,
            log_index: row.log_index,
            block_hash: row.block_hash.clone(),
            tx_hash: row.tx_hash.clone(),
            block_time_ms: row.block_time_ms,
            exchange: row.exchange.clone(),
            exchange_version: row.exchange_version,
            order_hash: row.order_hash.clone(),
            maker: row.maker.clone(),
            taker: row.taker.clone(),
            side: if row.side == 0 { "BUY" } else { "SELL" }.into(),
            token_id: row.token_id.clone(),
            shares: row.shares.clone(),
            collateral: row.collateral.clone(),
            price: row.price.clone(),
            fee: row.fee.clone(),
            fee_asset: row.fee_asset.clone(),
        }
    }
}

/// Market metadata, when the background resolver has it (Gamma API, cached in `market_names`):
/// enough to render a readable line (title, outcome, price from `trade.price`, a link to
/// `https://polymarket.com/event/<event_slug>`). Absent while the market is not resolved yet
/// (nothing waits for it); a field Gamma did not give is absent too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Market {
    /// The market's title (Gamma's `question`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(example = "Will it rain in Paris on Friday?")
    )]
    pub question: Option<String>,
    /// The name of the traded outcome (`Yes`, `No`, a candidate…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(example = "Yes"))]
    pub outcome: Option<String>,
    /// The market's slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slug: Option<String>,
    /// The slug of the market's event (`https://polymarket.com/event/<event_slug>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(example = "paris-weather"))]
    pub event_slug: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_id: Option<String>,
}

/// A `trade` or `retract`: the body of a WebSocket frame and of a webhook (with `type` and
/// `t_push_ms` in front, see [`stamp`]), and one item of `GET /v1/trades`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TradeMessage {
    /// `BBBBBBBBBBBB-LLLLLL`: the trade's place in the ledger; page after it over REST.
    #[cfg_attr(feature = "openapi", schema(example = "000081234567-000042"))]
    pub cursor: String,
    /// `<cursor>:<first 8 hex digits of the block hash>`: resume the WebSocket with
    /// `since=<resume>` (a reorg of that block is then detected and repaired).
    #[cfg_attr(feature = "openapi", schema(example = "000081234567-000042:ab12cd34"))]
    pub resume: String,
    /// When pmw-live received the block header (ms since the epoch).
    pub t_detect_ms: i64,
    /// Ingested by the gap backfill rather than live.
    pub backfilled: bool,
    /// The trade's block is finalized (at or below the chain's `finalized` block): it can no
    /// longer be reorganised away. Live `trade` frames are sent before that (`false`); a `final`
    /// with the full body says `true`.
    #[serde(default)]
    pub finalized: bool,
    /// Found missing by pmw-live's completeness audit of finalized blocks and stored then
    /// (`backfilled` too; `t_detect_ms` is the audit's time).
    #[serde(default)]
    pub audit: bool,
    pub trade: Trade,
    /// The market's names, when the background resolver has them; absent while it has not
    /// (a fill never waits for its names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub market: Option<Market>,
    /// The `pending` this trade confirms (its `pending_id`), when the pending tier saw its
    /// settlement in the mempool first; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_id: Option<i64>,
}

impl TradeMessage {
    pub fn from_row(row: &TradeRow, market: Option<&Market>) -> TradeMessage {
        TradeMessage {
            cursor: row.cursor().to_string(),
            resume: Position::of(row.cursor(), &row.block_hash).to_string(),
            t_detect_ms: row.t_detect_ms,
            backfilled: row.backfilled == 1,
            finalized: false,
            audit: row.audit == 1,
            trade: Trade::from_row(row),
            market: market.cloned(),
            pending_id: None,
        }
    }

    /// The same body naming the pending fill it confirms (none: unchanged).
    pub fn confirming(mut self, pending_id: Option<i64>) -> TradeMessage {
        self.pending_id = pending_id;
        self
    }

    /// The JSON text of this body (a struct of strings and numbers: serialising cannot fail).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a trade message serialises")
    }

    /// The same body marked finalized.
    pub fn finalized(mut self, yes: bool) -> TradeMessage {
        self.finalized = yes;
        self
    }
}

/// The body of a `final` to a subscriber who also receives `trade`s: it names the trade (its
/// cursor and block hash) and is small. A subscriber who asked for `final` only gets the full
/// [`TradeMessage`] (with `finalized: true`) instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FinalNotice {
    /// The finalized trade's cursor.
    #[cfg_attr(feature = "openapi", schema(example = "000081234567-000042"))]
    pub cursor: String,
    #[cfg_attr(feature = "openapi", schema(example = "000081234567-000042:ab12cd34"))]
    pub resume: String,
    pub block_number: u64,
    pub log_index: u32,
    pub block_hash: String,
    /// The wallet that owns the fill.
    pub wallet: String,
    /// When pmw-live received the trade's block header (ms since the epoch).
    pub t_detect_ms: i64,
    /// The trade was found by the completeness audit (as in its `trade`).
    #[serde(default)]
    pub audit: bool,
}

impl FinalNotice {
    pub fn from_row(row: &TradeRow) -> FinalNotice {
        FinalNotice {
            cursor: row.cursor().to_string(),
            resume: Position::of(row.cursor(), &row.block_hash).to_string(),
            block_number: row.block_number,
            log_index: row.log_index,
            block_hash: row.block_hash.clone(),
            wallet: row.maker.clone(),
            t_detect_ms: row.t_detect_ms,
            audit: row.audit == 1,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a final notice serialises")
    }
}

/// What a message body is: `trade` (a fill of the canonical chain), `retract` (a fill a reorg
/// removed, sent with the body it was delivered with), `final` (the fill's block is finalized),
/// `pending` (a fill of a settlement seen in the mempool, not mined yet) or `void` (a `pending`
/// that will not confirm, with its reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Trade,
    Retract,
    Final,
    Pending,
    Void,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Trade => "trade",
            Kind::Retract => "retract",
            Kind::Final => "final",
            Kind::Pending => "pending",
            Kind::Void => "void",
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = String;

    /// `"trade"`, `"retract"`, `"final"`, `"pending"` or `"void"`.
    fn from_str(s: &str) -> Result<Kind, String> {
        match s {
            "trade" => Ok(Kind::Trade),
            "retract" => Ok(Kind::Retract),
            "final" => Ok(Kind::Final),
            "pending" => Ok(Kind::Pending),
            "void" => Ok(Kind::Void),
            other => Err(format!("unknown message kind {other:?}")),
        }
    }
}

/// Which events a subscriber receives: `trade` (with its `retract`s) at once, `final` when the
/// trade's block is finalized, or both; and, opted in beside `trade`, `pending` (with its
/// `void`s) from the mempool. The default is `trade` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Events {
    pub trade: bool,
    pub fin: bool,
    pub pending: bool,
}

impl Default for Events {
    fn default() -> Events {
        Events::TRADE
    }
}

impl Events {
    pub const TRADE: Events = Events {
        trade: true,
        fin: false,
        pending: false,
    };
    pub const FINAL: Events = Events {
        trade: false,
        fin: true,
        pending: false,
    };
    pub const BOTH: Events = Events {
        trade: true,
        fin: true,
        pending: false,
    };

    /// From names (`trade`, `final`, `pending`); at least one of `trade` and `final`, no
    /// unknown name, and `pending` only beside `trade` (a pending is followed by its trade).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Events, String> {
        let mut e = Events {
            trade: false,
            fin: false,
            pending: false,
        };
        for n in names {
            match n.as_ref().trim() {
                "trade" => e.trade = true,
                "final" => e.fin = true,
                "pending" => e.pending = true,
                other => {
                    return Err(format!(
                        "unknown event type {other:?}: expected trade, final or pending"
                    ))
                }
            }
        }
        if !e.trade && !e.fin {
            return Err("at least one event type is needed: trade, final".into());
        }
        if e.pending && !e.trade {
            return Err("pending needs trade (events=trade,pending)".into());
        }
        Ok(e)
    }

    /// From a comma-separated list (`trade,final`), as the WebSocket's `events` parameter.
    pub fn parse(list: &str) -> Result<Events, String> {
        Events::from_names(&list.split(',').collect::<Vec<_>>())
    }

    /// The names, in a fixed order.
    pub fn names(self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.trade {
            v.push("trade");
        }
        if self.fin {
            v.push("final");
        }
        if self.pending {
            v.push("pending");
        }
        v
    }

    /// `final` only: the session's (or endpoint's) stream is the finalized ledger.
    pub fn final_only(self) -> bool {
        self.fin && !self.trade
    }
}

mod pending;
pub use pending::{CalldataFill, PendingFill, PendingMessage, VoidMessage};

/// The WebSocket control frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Control {
    /// First frame of a session: where it starts (`cursor`, and `resume` to reconnect with) and
    /// the chain head pmw has ingested.
    Hello {
        session: u64,
        account: i64,
        epoch: i64,
        cursor: String,
        resume: String,
        head: u64,
        /// With `events=trade,final`: the last trade whose `final` the session has (resume the
        /// `final`s with `final_since=<final_cursor>`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        final_cursor: Option<String>,
    },
    /// Every `PMW_PUSH_WS_HEARTBEAT_MS`: the session is alive; `cursor`/`resume` are where it
    /// stands (the last trade sent, or the common ancestor after a reorg).
    Heartbeat {
        head: u64,
        cursor: String,
        resume: String,
        t_ms: i64,
        /// As in `hello`: where the session's `final`s stand (with `events=trade,final`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        final_cursor: Option<String>,
    },
    /// The replay exceeded the resume window: backfill after `after` over REST, then reconnect.
    Resync { after: String, reason: String },
}

impl Control {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a control frame serialises")
    }
}

/// A `trade` or `retract` as sent (WebSocket frame, webhook body): what `stamp` writes, typed
/// for its schema and for readers. Never used to write: `stamp` splices the rendered body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PushedMessage {
    /// `trade`, or `retract` (a fill a reorg removed, with the body it was delivered with).
    #[serde(rename = "type")]
    pub kind: Kind,
    /// When push sent it (ms since the epoch).
    pub t_push_ms: i64,
    #[serde(flatten)]
    pub body: TradeMessage,
}

/// A message of `kind` from a pre-rendered body, stamped `t_push_ms`: the body's fields are
/// spliced after `type` and `t_push_ms` without re-serialising it.
pub fn stamp(kind: Kind, body_json: &str, t_push_ms: i64) -> String {
    debug_assert!(body_json.starts_with('{'));
    let kind = kind.as_str();
    let rest = &body_json[1..];
    if rest.trim_start().starts_with('}') {
        format!("{{\"type\":\"{kind}\",\"t_push_ms\":{t_push_ms}}}")
    } else {
        format!("{{\"type\":\"{kind}\",\"t_push_ms\":{t_push_ms},{rest}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn row() -> TradeRow {
        TradeRow {
            block_number: 12,
            log_index: 3,
            block_hash: "0xaabbccdd00112233".into(),
            tx_hash: "0xbb".into(),
            block_time_ms: 1_700_000_000_000,
            exchange: "0xcc".into(),
            exchange_version: 2,
            order_hash: "0xdd".into(),
            maker: "0x11".into(),
            taker: "0x22".into(),
            side: 1,
            token_id: "99".into(),
            shares: "2".into(),
            collateral: "1.04".into(),
            price: "0.52".into(),
            fee: "0".into(),
            fee_asset: "collateral".into(),
            t_detect_ms: 5,
            backfilled: 1,
            retracted: 0,
            version: 1,
            audit: 0,
        }
    }

    #[test]
    fn stamp_produces_valid_json_with_type_first() {
        let s = stamp(
            Kind::Trade,
            r#"{"cursor":"000000000001-000002","t_detect_ms":5}"#,
            9,
        );
        assert!(s.starts_with(r#"{"type":"trade","t_push_ms":9,"#), "{s}");
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["cursor"], "000000000001-000002");
        assert_eq!(v["t_detect_ms"], 5);
        let empty: Value = serde_json::from_str(&stamp(Kind::Retract, "{}", 1)).unwrap();
        assert_eq!(empty["type"], "retract");
    }

    #[test]
    fn a_stamped_trade_round_trips_through_the_typed_message() {
        let market = Market {
            question: Some("Will it rain?".into()),
            outcome: Some("Yes".into()),
            slug: None,
            event_slug: Some("rain".into()),
            condition_id: None,
        };
        let m = TradeMessage::from_row(&row(), Some(&market));
        let wire: Value = serde_json::from_str(&stamp(Kind::Trade, &m.to_json(), 7)).unwrap();
        assert_eq!(wire["cursor"], "000000000012-000003");
        assert_eq!(wire["resume"], "000000000012-000003:aabbccdd");
        assert_eq!(wire["trade"]["side"], "SELL");
        assert_eq!(wire["trade"]["wallet"], "0x11");
        assert_eq!(wire["backfilled"], true);
        assert_eq!(wire["audit"], false);
        assert_eq!(wire["market"]["question"], "Will it rain?");
        assert_eq!(wire["market"]["event_slug"], "rain");
        assert!(
            wire["market"].get("slug").is_none(),
            "a name not known is absent"
        );
        let unnamed: Value =
            serde_json::from_str(&TradeMessage::from_row(&row(), None).to_json()).unwrap();
        assert!(
            unnamed.get("market").is_none(),
            "no names yet: no market field"
        );
        let back: TradeMessage = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(back, m);
        // A body without `audit` (sent before the audit existed) reads as not found by it.
        let mut old = wire;
        old.as_object_mut().unwrap().remove("audit");
        let back: TradeMessage = serde_json::from_value(old).unwrap();
        assert!(!back.audit);
    }

    #[test]
    fn a_stamped_message_is_a_pushed_message_field_for_field() {
        let m = TradeMessage::from_row(&row(), None);
        let wire = stamp(Kind::Retract, &m.to_json(), 11);
        let typed: PushedMessage = serde_json::from_str(&wire).unwrap();
        assert_eq!(typed.kind, Kind::Retract);
        assert_eq!(typed.t_push_ms, 11);
        assert_eq!(typed.body, m);
        let a: Value = serde_json::from_str(&wire).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), a);
    }

    #[test]
    fn event_lists_parse_strictly() {
        assert_eq!(Events::parse("trade").unwrap(), Events::TRADE);
        assert_eq!(Events::parse("final").unwrap(), Events::FINAL);
        assert_eq!(Events::parse("final,trade").unwrap(), Events::BOTH);
        assert!(Events::parse("").is_err());
        assert!(Events::parse("trades").is_err());
        assert_eq!(Events::BOTH.names(), vec!["trade", "final"]);
        assert!(Events::FINAL.final_only() && !Events::BOTH.final_only());
        let p = Events::parse("trade,pending").unwrap();
        assert!(p.pending && p.trade && !p.fin);
        assert_eq!(p.names(), vec!["trade", "pending"]);
        assert!(Events::parse("pending").is_err(), "pending needs trade");
        assert!(Events::parse("final,pending").is_err());
        assert_eq!(Events::default(), Events::TRADE, "pending is opt-in");
    }

    #[test]
    fn a_final_notice_names_the_trade() {
        let n: Value = serde_json::from_str(&stamp(
            Kind::Final,
            &FinalNotice::from_row(&row()).to_json(),
            8,
        ))
        .unwrap();
        assert_eq!(n["type"], "final");
        assert_eq!(n["cursor"], "000000000012-000003");
        assert_eq!(n["block_hash"], "0xaabbccdd00112233");
        assert!(n.get("trade").is_none(), "small: no trade body");
    }

    #[test]
    fn control_frames_carry_their_type_tag() {
        let v: Value = serde_json::from_str(
            &Control::Resync {
                after: "000000000001-000002".into(),
                reason: "r".into(),
            }
            .to_json(),
        )
        .unwrap();
        assert_eq!(v["type"], "resync");
        assert_eq!(v["after"], "000000000001-000002");
        let hb: Value = serde_json::from_str(
            &Control::Heartbeat {
                head: 3,
                cursor: "c".into(),
                resume: "c:00000000".into(),
                t_ms: 4,
                final_cursor: None,
            }
            .to_json(),
        )
        .unwrap();
        assert_eq!(hb["type"], "heartbeat");
        assert_eq!(hb["head"], 3);
    }
}
