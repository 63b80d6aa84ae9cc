//! Test support for pmw: starts the real local stack when it is not running, gives each test its
//! own migrated Postgres database and ClickHouse database (dropped afterwards), runs services
//! in-process or as child processes, and holds the helpers every test binary shares (free ports,
//! polling, a JSON client, webhook receivers). It depends on no service crate.

mod caddy;
pub mod chdb;
mod db;
mod guard;
pub mod hooks;
mod hosts;
mod http;
mod net;
mod private;
mod proc;
mod proxy;
pub mod rows;
mod rpc_proxy;
pub mod seed;
mod service;
mod stack;
mod wait;

pub use caddy::caddy;
pub use chdb::ChdbServer;
pub use db::{column, TestDb};
pub use guard::{schema_guard, schema_guard_with, Unreachable};
pub use hosts::{Host, Hosts};
pub use http::{Http, Resp};
pub use net::free_port;
pub use private::PrivateStack;
pub use proc::{run_bin, ChildService};
pub use proxy::TcpProxy;
pub use rpc_proxy::RpcProxy;
pub use service::{bound_within, ServiceHandle};
pub use stack::{
    ha_stack_env, nats_role, nats_urls, repo_root, stack_env, workspace_bin, NatsRole, StackEnv,
};
pub use wait::{eventually, eventually_blocking, eventually_every, observe_for, Settled};
