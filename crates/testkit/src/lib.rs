//! Test support for pmw: starts the real local stack when it is not running, gives each test its
//! own migrated Postgres database and ClickHouse database (dropped afterwards), runs services
//! in-process or as child processes.

mod db;
mod guard;
mod private;
mod proc;
mod proxy;
mod service;
mod stack;

pub use db::TestDb;
pub use guard::schema_guard;
pub use private::PrivateStack;
pub use proc::{run_bin, ChildService};
pub use proxy::TcpProxy;
pub use service::ServiceHandle;
pub use stack::{repo_root, stack_env, StackEnv};
