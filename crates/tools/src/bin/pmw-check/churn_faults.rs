//! The churn faults the checker does through the API, as a customer would: endpoints created,
//! deleted, disabled and rotated, subscriptions added and removed, keys revoked, a client that
//! stops reading.

use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::faults::{Marks, World};
use crate::schedule::Kind;
use crate::ws::now_ms;

impl World {
    /// One churn fault (or a client paused); its note says what happened.
    pub async fn run_churn(&self, kind: &Kind, m: &Marks) -> anyhow::Result<String> {
        match kind {
            Kind::EndpointCreate { .. }
            | Kind::EndpointDelete { .. }
            | Kind::EndpointDisable { .. }
            | Kind::Rotate { .. } => self.run_endpoint(kind).await,
            k => self.run_account(k, m).await,
        }
    }

    /// A churn account's endpoint created, deleted or disabled for a while; a checked one's
    /// secret rotated.
    async fn run_endpoint(&self, kind: &Kind) -> anyhow::Result<String> {
        let secs = |s: u64| tokio::time::sleep(Duration::from_secs(s));
        Ok(match kind {
            Kind::EndpointCreate { account } => {
                let c = &self.churn[*account];
                let key = c.client.key.lock().unwrap().clone();
                let n = self
                    .endpoint_seq
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let v = self
                    .api(
                        "POST",
                        "/v1/webhooks",
                        &key,
                        json!({"url": c.hook.url_for(n)}),
                    )
                    .await?;
                c.hook.add_secret(v["secret"].as_str().unwrap_or_default());
                let id = v["id"].as_i64().unwrap_or_default();
                c.endpoints.lock().unwrap().push(id);
                c.paths.lock().unwrap().insert(id, format!("/hook/{n}"));
                format!("endpoint {id}")
            }
            Kind::EndpointDelete { account } => {
                let c = &self.churn[*account];
                let key = c.client.key.lock().unwrap().clone();
                let Some(id) = c.endpoints.lock().unwrap().pop() else {
                    return Ok("no endpoint to delete".into());
                };
                self.api("DELETE", &format!("/v1/webhooks/{id}"), &key, Value::Null)
                    .await?;
                if let Some(p) = c.paths.lock().unwrap().get(&id) {
                    c.paused
                        .lock()
                        .unwrap()
                        .push((p.clone(), now_ms(), i64::MAX));
                }
                format!("endpoint {id}")
            }
            Kind::EndpointDisable { account, secs: s } => {
                let c = &self.churn[*account];
                let key = c.client.key.lock().unwrap().clone();
                let Some(id) = c.endpoints.lock().unwrap().last().copied() else {
                    return Ok("no endpoint to disable".into());
                };
                let path = format!("/v1/webhooks/{id}");
                let from = now_ms();
                self.api("PATCH", &path, &key, json!({"enabled": false}))
                    .await?;
                secs(*s).await;
                self.api("PATCH", &path, &key, json!({"enabled": true}))
                    .await?;
                if let Some(p) = c.paths.lock().unwrap().get(&id) {
                    c.paused.lock().unwrap().push((p.clone(), from, now_ms()));
                }
                format!("endpoint {id} disabled, enabled")
            }
            Kind::Rotate { endpoint } => {
                let c = &self.checked[*endpoint];
                let v = self
                    .api(
                        "POST",
                        &format!("/v1/webhooks/{}/rotate-secret", c.endpoint),
                        &c.key,
                        json!({}),
                    )
                    .await?;
                c.hook.add_secret(v["secret"].as_str().unwrap_or_default());
                format!("endpoint {}", c.endpoint)
            }
            k => bail!("{k} is not an endpoint fault"),
        })
    }

    /// A churn account's subscription added or removed, its key revoked; a checked client
    /// paused.
    async fn run_account(&self, kind: &Kind, m: &Marks) -> anyhow::Result<String> {
        let secs = |s: u64| tokio::time::sleep(Duration::from_secs(s));
        Ok(match kind {
            Kind::SubAdd { account, wallet } => {
                let c = &self.churn[*account];
                let key = c.client.key.lock().unwrap().clone();
                let w = format!("0x{}", self.wallets[*wallet]);
                self.api("POST", "/v1/subscriptions", &key, json!({"wallet": w}))
                    .await?;
                w
            }
            Kind::SubRemove { account, wallet } => {
                let c = &self.churn[*account];
                let key = c.client.key.lock().unwrap().clone();
                let wallet = {
                    let mut f = c.follows.lock().unwrap();
                    if f.is_empty() {
                        return Ok("follows nothing".into());
                    }
                    let i = wallet % f.len();
                    f.remove(i)
                };
                let w = format!("0x{}", self.wallets[wallet]);
                match self
                    .api(
                        "DELETE",
                        &format!("/v1/subscriptions/{w}"),
                        &key,
                        Value::Null,
                    )
                    .await
                {
                    Ok(_) => w,
                    Err(e) => format!("{w}: {e}"),
                }
            }
            Kind::KeyRevoke { account } => {
                let c = &self.churn[*account];
                let old = c.client.key.lock().unwrap().clone();
                let v = self.api("POST", "/v1/keys", &old, json!({})).await?;
                let new = v["key"].as_str().context("new key")?.to_string();
                self.api(
                    "DELETE",
                    &format!("/v1/keys/{}", &old[..12]),
                    &old,
                    Value::Null,
                )
                .await?;
                // The open session is closed by the revocation; the client reconnects with
                // the new key (and resumes).
                tokio::time::sleep(Duration::from_millis(1500)).await;
                *c.client.key.lock().unwrap() = new;
                format!("revoked {}", &old[..12])
            }
            Kind::SlowConsumer { client, secs: s } => {
                let c = &self.checked[*client].client;
                m.begin();
                c.paused_until.store(
                    now_ms() + *s as i64 * 1000,
                    std::sync::atomic::Ordering::Relaxed,
                );
                secs(*s).await;
                m.end();
                "paused, resumed".into()
            }
            k => bail!("{k} is an edge-mode fault"),
        })
    }
}
