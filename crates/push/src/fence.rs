//! The push slot's fence: the slot and the epoch its leader holds. Every cursor move, claim,
//! enqueue and delivery result of that leader checks it against `push_epoch` in the same
//! statement, so a deposed leader's writes fail.

/// A leader's claim on its slot: every cursor move and claim checks it in the same statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub slot: i16,
    pub epoch: i64,
}
