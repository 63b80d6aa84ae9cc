//! Domain value types shared by every service: wallet addresses, trade cursors and resume
//! positions, millisecond times.

mod address;
pub mod cursor;
pub mod position;
mod time;

pub use address::{Address, AddressError};
pub use cursor::{Cursor, CursorError};
pub use position::{Position, PositionError};
pub use time::UnixMs;
