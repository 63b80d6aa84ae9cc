//! pmwctl's integration tests: the binary run against the real local stack (tests that also run
//! push or live are in the top-level `tests/e2e`).

mod accounts;
mod decode_log;
mod migrate;
mod secrets;
mod status;
