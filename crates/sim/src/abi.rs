//! A minimal Solidity ABI encoder (head/tail layout for 32-byte words, tuples and dynamic
//! arrays: all pmw-sim's calldata needs), keccak-256 helpers, and word readers for decoding
//! event data.

use pmw_core::Address;
use sha3::{Digest, Keccak256};

use crate::types::{TokenId, B256};

/// One 32-byte ABI word.
pub type Word = [u8; 32];

/// A value to encode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    /// Any static 32-byte value (uintN, address, bytes32, bool, enum).
    Word(Word),
    /// A tuple (struct); static when all its members are.
    Tuple(Vec<Token>),
    /// A dynamic-length array `T[]`.
    Array(Vec<Token>),
}

impl Token {
    pub fn uint(v: u128) -> Token {
        let mut w = [0u8; 32];
        w[16..].copy_from_slice(&v.to_be_bytes());
        Token::Word(w)
    }

    pub fn address(a: &Address) -> Token {
        Token::Word(address_word(a))
    }

    pub fn bytes32(b: &B256) -> Token {
        Token::Word(b.0)
    }

    pub fn token_id(id: TokenId) -> Token {
        Token::Word(id.to_be_bytes())
    }

    fn is_dynamic(&self) -> bool {
        match self {
            Token::Word(_) => false,
            Token::Tuple(members) => members.iter().any(Token::is_dynamic),
            Token::Array(_) => true,
        }
    }

    /// Bytes this token takes in its enclosing head.
    fn head_len(&self) -> usize {
        match self {
            _ if self.is_dynamic() => 32,
            Token::Word(_) => 32,
            Token::Tuple(members) => members.iter().map(Token::head_len).sum(),
            Token::Array(_) => unreachable!("arrays are dynamic"),
        }
    }
}

/// Left-pads an address into a word.
pub fn address_word(a: &Address) -> Word {
    let mut w = [0u8; 32];
    w[12..].copy_from_slice(a.as_bytes());
    w
}

/// Encodes `tokens` as the members of one tuple (the layout of function arguments).
pub fn encode(tokens: &[Token]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_tuple(tokens, &mut out);
    out
}

/// `selector ‖ encode(args)`.
pub fn calldata(selector: [u8; 4], args: &[Token]) -> Vec<u8> {
    let mut out = selector.to_vec();
    encode_tuple(args, &mut out);
    out
}

fn encode_tuple(members: &[Token], out: &mut Vec<u8>) {
    let head_len: usize = members.iter().map(Token::head_len).sum();
    let mut tail = Vec::new();
    for m in members {
        if m.is_dynamic() {
            out.extend_from_slice(&usize_word(head_len + tail.len()));
            encode_dynamic(m, &mut tail);
        } else {
            encode_static(m, out);
        }
    }
    out.extend_from_slice(&tail);
}

fn encode_static(t: &Token, out: &mut Vec<u8>) {
    match t {
        Token::Word(w) => out.extend_from_slice(w),
        Token::Tuple(members) => members.iter().for_each(|m| encode_static(m, out)),
        Token::Array(_) => unreachable!("arrays are dynamic"),
    }
}

fn encode_dynamic(t: &Token, out: &mut Vec<u8>) {
    match t {
        Token::Array(items) => {
            out.extend_from_slice(&usize_word(items.len()));
            encode_tuple(items, out);
        }
        Token::Tuple(members) => encode_tuple(members, out),
        Token::Word(_) => unreachable!("words are static"),
    }
}

fn usize_word(v: usize) -> Word {
    let mut w = [0u8; 32];
    w[24..].copy_from_slice(&(v as u64).to_be_bytes());
    w
}

/// keccak-256 of `bytes`.
pub fn keccak256(bytes: impl AsRef<[u8]>) -> [u8; 32] {
    Keccak256::digest(bytes.as_ref()).into()
}

/// The 4-byte function selector of a canonical signature such as `f(uint256,address)`.
pub fn selector(signature: &str) -> [u8; 4] {
    let h = keccak256(signature.as_bytes());
    [h[0], h[1], h[2], h[3]]
}

/// The topic0 of an event with the canonical signature `signature`.
pub fn event_topic(signature: &str) -> B256 {
    B256(keccak256(signature.as_bytes()))
}

/// Word `i` of ABI data, if present.
pub fn word(data: &[u8], i: usize) -> Option<&[u8; 32]> {
    data.get(i * 32..(i + 1) * 32)
        .and_then(|s| s.try_into().ok())
}

/// A word as an unsigned integer that must fit in a u64.
pub fn word_u64(w: &[u8; 32]) -> Option<u64> {
    if w[..24].iter().any(|b| *b != 0) {
        return None;
    }
    Some(u64::from_be_bytes(w[24..].try_into().ok()?))
}

/// A word as an address (the upper 12 bytes must be zero).
pub fn word_address(w: &[u8; 32]) -> Option<Address> {
    if w[..12].iter().any(|b| *b != 0) {
        return None;
    }
    Address::from_slice(&w[12..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hexw(s: &str) -> String {
        s.split_whitespace().collect()
    }

    #[test]
    fn selector_of_transfer() {
        assert_eq!(
            hex::encode(selector("transfer(address,uint256)")),
            "a9059cbb"
        );
    }

    #[test]
    fn static_tuple_then_array_of_static_tuples() {
        // f((uint256,uint256), (uint256,uint256)[]) with (1,2) and [(3,4)]
        let t = |a, b| Token::Tuple(vec![Token::uint(a), Token::uint(b)]);
        let enc = encode(&[t(1, 2), Token::Array(vec![t(3, 4)])]);
        let w = |v: u8| format!("{:064x}", v);
        let expected = hexw(&format!(
            "{} {} {} {} {} {}",
            w(1),
            w(2),
            w(0x60), // offset of the array: after 3 head words
            w(1),    // length
            w(3),
            w(4)
        ));
        assert_eq!(hex::encode(enc), expected);
    }

    #[test]
    fn empty_array() {
        let enc = encode(&[Token::uint(7), Token::Array(vec![])]);
        assert_eq!(enc.len(), 3 * 32);
        assert_eq!(word_u64(word(&enc, 1).unwrap()), Some(0x40));
        assert_eq!(word_u64(word(&enc, 2).unwrap()), Some(0));
    }

    #[test]
    fn word_readers() {
        let a: Address = "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e"
            .parse()
            .unwrap();
        let w = address_word(&a);
        assert_eq!(word_address(&w), Some(a));
        assert_eq!(word_u64(&w), None);
        let Token::Word(u) = Token::uint(42) else {
            unreachable!()
        };
        assert_eq!(word_u64(&u), Some(42));
    }
}
