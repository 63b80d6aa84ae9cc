//! Real webhook receivers on 127.0.0.1: a scripted Rust one and the independent Python
//! `standardwebhooks` one, and one per chat service (`chat`).

mod chat;
mod py;
mod receiver;

pub use chat::{ChatHit, ChatReceiver, Play, Service, TELEGRAM_TOKEN};
pub use py::{python_sign, python_signature_of, PyReceiver};
pub use receiver::{Hit, Receiver, Step};
