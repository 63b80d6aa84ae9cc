//! Real webhook receivers on 127.0.0.1: a scripted Rust one and the independent Python
//! `standardwebhooks` one.

mod py;
mod receiver;

pub use py::{python_sign, python_signature_of, PyReceiver};
pub use receiver::{Hit, Receiver, Step};
