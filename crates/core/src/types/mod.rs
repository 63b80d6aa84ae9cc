//! Domain value types shared by every service: wallet addresses, trade cursors, millisecond times.

mod address;
pub mod cursor;
mod time;

pub use address::{Address, AddressError};
pub use cursor::{Cursor, CursorError};
pub use time::UnixMs;
