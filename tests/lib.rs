//! Cross-service end-to-end tests and drills live beside this file; they run on the real local
//! stack started by `scripts/stack` (see `pmw-testkit`).
