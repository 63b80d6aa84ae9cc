//! The guarded HTTP client every webhook attempt goes through: [`pmw_core::ssrf::client`] (shared
//! with the API's test events), whose DNS resolver ([`pmw_core::ssrf::resolve`]) drops forbidden
//! addresses from each answer, so the address connected to is the one checked. Re-exported here
//! under the names the delivery engine uses.

pub use pmw_core::ssrf::client::{
    ClientBuildError, GuardedClient, HttpResponse, SendError, BODY_SNIPPET_BYTES,
    POOL_IDLE_PER_HOST, USER_AGENT,
};
pub use pmw_core::ssrf::resolve::{filter_addrs, resolve_checked, GuardedResolver, Refused};
