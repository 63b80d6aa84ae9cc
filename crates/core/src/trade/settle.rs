//! Settlement calldata (docs/SETTLEMENT.md): the calls that settle Polymarket matches on chain
//! (V1 exchange `fillOrder`/`fillOrders`/`matchOrders`, the V1 fee module's `matchOrders`, V2's
//! `matchOrders`) decoded into the fills they will emit once mined, each order with the EIP-712
//! hash its `OrderFilled` will carry. Pure: no I/O, never panics on any input.

use std::sync::OnceLock;

use ethabi::{ParamType, Token};
use primitive_types::U256;
use sha3::{Digest, Keccak256};

use super::exchange::AbiVersion;
use super::Side;
use crate::types::Address;

/// The V1 order tuple (Polymarket/ctf-exchange `OrderStructs.sol`).
const V1_ORDER: &str = "(uint256,address,address,address,uint256,uint256,uint256,uint256,uint256,\
uint256,uint8,uint8,bytes)";
/// The V2 order tuple (CLOB V2 `Structs.sol`): no taker/expiration/nonce/fee rate; timestamp,
/// metadata and builder instead.
const V2_ORDER: &str = "(uint256,address,address,uint256,uint256,uint256,uint8,uint8,uint256,\
bytes32,bytes32,bytes)";

/// EIP-712 type strings the exchanges hash orders with.
pub const V1_ORDER_TYPE: &str = "Order(uint256 salt,address maker,address signer,address taker,\
uint256 tokenId,uint256 makerAmount,uint256 takerAmount,uint256 expiration,uint256 nonce,\
uint256 feeRateBps,uint8 side,uint8 signatureType)";
pub const V2_ORDER_TYPE: &str = "Order(uint256 salt,address maker,address signer,uint256 tokenId,\
uint256 makerAmount,uint256 takerAmount,uint8 side,uint8 signatureType,uint256 timestamp,\
bytes32 metadata,bytes32 builder)";
const DOMAIN_TYPE: &str =
    "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)";
const DOMAIN_NAME: &str = "Polymarket CTF Exchange";

/// One settlement entry point.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Call {
    /// V1 exchange `fillOrder(order, fillAmount)`: one order filled against the operator.
    V1FillOrder,
    /// V1 exchange `fillOrders(orders, fillAmounts)`.
    V1FillOrders,
    /// V1 exchange `matchOrders(takerOrder, makerOrders, takerFillAmount, makerFillAmounts)`.
    V1MatchOrders,
    /// V1 fee module `matchOrders(takerOrder, makerOrders, takerFillAmount, takerReceiveAmount,
    /// makerFillAmounts, takerFeeAmount, makerFeeAmounts)`, proxied to the exchange.
    V1FeeModuleMatchOrders,
    /// V2 exchange `matchOrders(conditionId, takerOrder, makerOrders, takerFillAmount,
    /// makerFillAmounts, takerFeeAmount, makerFeeAmounts)`.
    V2MatchOrders,
}

impl Call {
    pub const ALL: [Call; 5] = [
        Call::V1FillOrder,
        Call::V1FillOrders,
        Call::V1MatchOrders,
        Call::V1FeeModuleMatchOrders,
        Call::V2MatchOrders,
    ];

    /// The canonical Solidity signature the selector is the hash of.
    pub fn signature(self) -> String {
        match self {
            Call::V1FillOrder => format!("fillOrder({V1_ORDER},uint256)"),
            Call::V1FillOrders => format!("fillOrders({V1_ORDER}[],uint256[])"),
            Call::V1MatchOrders => {
                format!("matchOrders({V1_ORDER},{V1_ORDER}[],uint256,uint256[])")
            }
            Call::V1FeeModuleMatchOrders => format!(
                "matchOrders({V1_ORDER},{V1_ORDER}[],uint256,uint256,uint256[],uint256,uint256[])"
            ),
            Call::V2MatchOrders => format!(
                "matchOrders(bytes32,{V2_ORDER},{V2_ORDER}[],uint256,uint256[],uint256,uint256[])"
            ),
        }
    }

    /// The 4-byte selector: the first bytes of keccak256 of [`Call::signature`].
    pub fn selector(self) -> [u8; 4] {
        static SELECTORS: OnceLock<Vec<(Call, [u8; 4])>> = OnceLock::new();
        let all = SELECTORS.get_or_init(|| {
            Call::ALL
                .iter()
                .map(|c| {
                    let h = keccak(c.signature().as_bytes());
                    (*c, [h[0], h[1], h[2], h[3]])
                })
                .collect()
        });
        all.iter()
            .find(|(c, _)| *c == self)
            .map(|(_, s)| *s)
            .unwrap_or_default()
    }

    /// The call a selector names, if it is a settlement call.
    pub fn of_selector(selector: [u8; 4]) -> Option<Call> {
        Call::ALL.into_iter().find(|c| c.selector() == selector)
    }

    pub fn version(self) -> AbiVersion {
        match self {
            Call::V2MatchOrders => AbiVersion::V2,
            _ => AbiVersion::V1,
        }
    }

    /// The argument types, in order (checked against [`Call::signature`] by a test).
    pub fn params(self) -> Vec<ParamType> {
        let (order, orders) = (order_type(self.version()), order_list(self.version()));
        let (amount, amounts) = (ParamType::Uint(256), ParamType::Array(Box::new(u256())));
        match self {
            Call::V1FillOrder => vec![order, amount],
            Call::V1FillOrders => vec![orders, amounts],
            Call::V1MatchOrders => vec![order, orders, amount, amounts],
            Call::V1FeeModuleMatchOrders => vec![
                order,
                orders,
                amount.clone(),
                amount.clone(),
                amounts.clone(),
                amount,
                amounts,
            ],
            Call::V2MatchOrders => vec![
                ParamType::FixedBytes(32),
                order,
                orders,
                amount.clone(),
                amounts.clone(),
                amount,
                amounts,
            ],
        }
    }
}

/// The EIP-712 domain an exchange hashes orders in: the chain and the exchange contract itself
/// (for a fee module's call, the exchange it proxies to).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Domain {
    pub chain_id: u64,
    pub exchange: Address,
}

/// What a settlement call says of one order.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Order {
    /// The EIP-712 hash, the `orderHash` of the order's `OrderFilled`.
    pub hash: [u8; 32],
    pub salt: U256,
    /// The owner of the order (the `maker` of its `OrderFilled`).
    pub maker: Address,
    pub signer: Address,
    pub token_id: U256,
    pub maker_amount: U256,
    pub taker_amount: U256,
    pub side: Side,
}

/// Whether an order is the match's taker order or one it is matched against.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    Taker,
    Maker,
}

/// One fill the call will produce when it is mined: `making` is exact (the call's fill amount,
/// in the order's maker asset); `taking` is the order's price applied to it (exact for the fee
/// module's taker, which names it), so the mined log may differ from it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PlannedFill {
    pub order: Order,
    pub role: Role,
    pub making: U256,
    pub taking: U256,
    /// The fee the call names, where it names one (fee module, V2), in collateral base units.
    pub fee: Option<U256>,
}

impl PlannedFill {
    /// Outcome shares, base units: what a BUY takes, what a SELL makes.
    pub fn shares(&self) -> U256 {
        match self.order.side {
            Side::Buy => self.taking,
            Side::Sell => self.making,
        }
    }

    /// Collateral, base units: what a BUY makes, what a SELL takes.
    pub fn collateral(&self) -> U256 {
        match self.order.side {
            Side::Buy => self.making,
            Side::Sell => self.taking,
        }
    }
}

/// A decoded settlement: the maker orders' fills first, then the taker's, the order in which
/// the exchange emits their `OrderFilled` logs.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Settlement {
    pub call: Call,
    /// V2 names the market's condition id in the call.
    pub condition_id: Option<[u8; 32]>,
    pub fills: Vec<PlannedFill>,
}

/// Why calldata sent to an exchange is not a settlement pmw can announce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("calldata of {0} bytes is shorter than a selector")]
    Short(usize),
    /// Not a settlement (an admin call, a cancel, …): not an error of the data, just not ours.
    #[error("selector 0x{} is not a settlement call", hex::encode(.0))]
    NotSettlement([u8; 4]),
    #[error("{call:?} arguments do not decode: {reason}")]
    Abi { call: Call, reason: String },
    #[error("{call:?} arguments are inconsistent: {what}")]
    Invalid { call: Call, what: &'static str },
}

/// Decodes a transaction's input sent to an exchange (or fee module) of `domain`.
pub fn decode(input: &[u8], domain: &Domain) -> Result<Settlement, CallError> {
    let selector: [u8; 4] = input
        .get(..4)
        .and_then(|s| s.try_into().ok())
        .ok_or(CallError::Short(input.len()))?;
    let call = Call::of_selector(selector).ok_or(CallError::NotSettlement(selector))?;
    let args = ethabi::decode(&call.params(), &input[4..]).map_err(|e| CallError::Abi {
        call,
        reason: e.to_string(),
    })?;
    Decoder { call, domain }.settlement(args)
}

struct Decoder<'a> {
    call: Call,
    domain: &'a Domain,
}

impl Decoder<'_> {
    fn settlement(&self, args: Vec<Token>) -> Result<Settlement, CallError> {
        let mut a = args.into_iter();
        let call = self.call;
        let mut condition_id = None;
        if call == Call::V2MatchOrders {
            condition_id = Some(self.word(a.next())?);
        }
        let fills = match call {
            Call::V1FillOrder => {
                let order = self.order(a.next())?;
                let making = self.uint(a.next())?;
                vec![self.fill(order, Role::Maker, making, None)?]
            }
            Call::V1FillOrders => {
                let orders = self.orders(a.next())?;
                let amounts = self.uints(a.next())?;
                self.makers(orders, amounts, None)?
            }
            Call::V1MatchOrders => {
                let taker = self.order(a.next())?;
                let makers = self.orders(a.next())?;
                let taker_making = self.uint(a.next())?;
                let mut fills = self.makers(makers, self.uints(a.next())?, None)?;
                fills.push(self.fill(taker, Role::Taker, taker_making, None)?);
                fills
            }
            Call::V1FeeModuleMatchOrders | Call::V2MatchOrders => {
                let taker = self.order(a.next())?;
                let makers = self.orders(a.next())?;
                let taker_making = self.uint(a.next())?;
                let taker_receives = match call {
                    Call::V1FeeModuleMatchOrders => Some(self.uint(a.next())?),
                    _ => None,
                };
                let maker_making = self.uints(a.next())?;
                let taker_fee = self.uint(a.next())?;
                let maker_fees = self.uints(a.next())?;
                let mut fills = self.makers(makers, maker_making, Some(maker_fees))?;
                let mut taker = self.fill(taker, Role::Taker, taker_making, Some(taker_fee))?;
                if let Some(exact) = taker_receives {
                    taker.taking = exact;
                }
                fills.push(taker);
                fills
            }
        };
        Ok(Settlement {
            call,
            condition_id,
            fills,
        })
    }

    fn makers(
        &self,
        orders: Vec<Order>,
        making: Vec<U256>,
        fees: Option<Vec<U256>>,
    ) -> Result<Vec<PlannedFill>, CallError> {
        if orders.is_empty() {
            return Err(self.invalid("no orders"));
        }
        if making.len() != orders.len() || fees.as_ref().is_some_and(|f| f.len() != orders.len()) {
            return Err(self.invalid("one fill amount (and fee) per order expected"));
        }
        let mut fills = Vec::with_capacity(orders.len());
        for (i, (order, making)) in orders.into_iter().zip(making).enumerate() {
            let fee = fees.as_ref().map(|f| f[i]);
            fills.push(self.fill(order, Role::Maker, making, fee)?);
        }
        Ok(fills)
    }

    fn fill(
        &self,
        order: Order,
        role: Role,
        making: U256,
        fee: Option<U256>,
    ) -> Result<PlannedFill, CallError> {
        if making.is_zero() || order.maker_amount.is_zero() {
            return Err(self.invalid("zero fill or order amount"));
        }
        if making > order.maker_amount {
            return Err(self.invalid("fill amount above the order's maker amount"));
        }
        // CalculatorHelper.calculateTakingAmount: making * takerAmount / makerAmount, floored.
        let taking = making
            .checked_mul(order.taker_amount)
            .ok_or_else(|| self.invalid("amounts overflow"))?
            / order.maker_amount;
        Ok(PlannedFill {
            order,
            role,
            making,
            taking,
            fee,
        })
    }

    fn orders(&self, token: Option<Token>) -> Result<Vec<Order>, CallError> {
        match token {
            Some(Token::Array(items)) => items.into_iter().map(|t| self.order(Some(t))).collect(),
            _ => Err(self.invalid("order list expected")),
        }
    }

    fn order(&self, token: Option<Token>) -> Result<Order, CallError> {
        let Some(Token::Tuple(fields)) = token else {
            return Err(self.invalid("order tuple expected"));
        };
        let version = self.call.version();
        // The struct hash covers every field but the signature (the last one).
        let signed = &fields[..fields.len().saturating_sub(1)];
        let (type_str, side_at, token_at) = match version {
            AbiVersion::V1 => (V1_ORDER_TYPE, 10, 4),
            AbiVersion::V2 => (V2_ORDER_TYPE, 6, 3),
        };
        let mut head = vec![Token::FixedBytes(keccak(type_str.as_bytes()).to_vec())];
        head.extend_from_slice(signed);
        let struct_hash = keccak(&ethabi::encode(&head));
        let side = match self.uint(fields.get(side_at).cloned())?.as_u64() {
            0 => Side::Buy,
            1 => Side::Sell,
            _ => return Err(self.invalid("order side is neither BUY (0) nor SELL (1)")),
        };
        Ok(Order {
            hash: typed_data_hash(version, self.domain, &struct_hash),
            salt: self.uint(fields.first().cloned())?,
            maker: self.address(fields.get(1))?,
            signer: self.address(fields.get(2))?,
            token_id: self.uint(fields.get(token_at).cloned())?,
            maker_amount: self.uint(fields.get(token_at + 1).cloned())?,
            taker_amount: self.uint(fields.get(token_at + 2).cloned())?,
            side,
        })
    }

    fn uint(&self, token: Option<Token>) -> Result<U256, CallError> {
        match token {
            Some(Token::Uint(v)) => Ok(v),
            _ => Err(self.invalid("integer expected")),
        }
    }

    fn uints(&self, token: Option<Token>) -> Result<Vec<U256>, CallError> {
        match token {
            Some(Token::Array(items)) => items.into_iter().map(|t| self.uint(Some(t))).collect(),
            _ => Err(self.invalid("integer list expected")),
        }
    }

    fn word(&self, token: Option<Token>) -> Result<[u8; 32], CallError> {
        match token {
            Some(Token::FixedBytes(b)) => b.try_into().map_err(|_| self.invalid("bytes32")),
            _ => Err(self.invalid("bytes32 expected")),
        }
    }

    fn address(&self, token: Option<&Token>) -> Result<Address, CallError> {
        match token {
            Some(Token::Address(a)) => {
                Address::from_slice(a.as_bytes()).ok_or_else(|| self.invalid("address"))
            }
            _ => Err(self.invalid("address expected")),
        }
    }

    fn invalid(&self, what: &'static str) -> CallError {
        CallError::Invalid {
            call: self.call,
            what,
        }
    }
}

fn u256() -> ParamType {
    ParamType::Uint(256)
}

fn order_type(version: AbiVersion) -> ParamType {
    let (a, u, u8t, b32) = (ParamType::Address, u256(), ParamType::Uint(8), || {
        ParamType::FixedBytes(32)
    });
    ParamType::Tuple(match version {
        AbiVersion::V1 => vec![
            u.clone(),
            a.clone(),
            a.clone(),
            a,
            u.clone(),
            u.clone(),
            u.clone(),
            u.clone(),
            u.clone(),
            u,
            u8t.clone(),
            u8t,
            ParamType::Bytes,
        ],
        AbiVersion::V2 => vec![
            u.clone(),
            a.clone(),
            a,
            u.clone(),
            u.clone(),
            u.clone(),
            u8t.clone(),
            u8t,
            u,
            b32(),
            b32(),
            ParamType::Bytes,
        ],
    })
}

fn order_list(version: AbiVersion) -> ParamType {
    ParamType::Array(Box::new(order_type(version)))
}

/// The EIP-712 digest `keccak256(0x1901 ‖ domainSeparator ‖ structHash)`.
pub fn typed_data_hash(version: AbiVersion, domain: &Domain, struct_hash: &[u8; 32]) -> [u8; 32] {
    let version_str = match version {
        AbiVersion::V1 => "1",
        AbiVersion::V2 => "2",
    };
    let separator = keccak(&ethabi::encode(&[
        Token::FixedBytes(keccak(DOMAIN_TYPE.as_bytes()).to_vec()),
        Token::FixedBytes(keccak(DOMAIN_NAME.as_bytes()).to_vec()),
        Token::FixedBytes(keccak(version_str.as_bytes()).to_vec()),
        Token::Uint(U256::from(domain.chain_id)),
        Token::Address(ethabi::Address::from_slice(domain.exchange.as_bytes())),
    ]));
    let mut buf = Vec::with_capacity(66);
    buf.extend_from_slice(&[0x19, 0x01]);
    buf.extend_from_slice(&separator);
    buf.extend_from_slice(struct_hash);
    keccak(&buf)
}

pub(crate) fn keccak(bytes: &[u8]) -> [u8; 32] {
    Keccak256::digest(bytes).into()
}
