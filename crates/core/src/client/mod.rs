//! Who the client is and how often it may fail: the client-address rule ([`addr`]:
//! `X-Forwarded-For` believed only from configured proxies) and the per-address throttle of
//! failed authentication ([`throttle`]), one rule shared by pmw-api and pmw-push.

pub mod addr;
pub mod throttle;

pub use addr::{client_addr, TrustedProxies};
pub use throttle::{unit as address_unit, Admission, FailureThrottle};
