//! A small JSON client for a service a test started: bearer-authenticated calls, and each
//! response as status, headers, text and JSON.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::wait::eventually_every;

/// One response: status, headers and the body as JSON (`Value::Null` when it is not JSON).
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Resp {
    /// Read a response in full.
    pub async fn read(r: reqwest::Response) -> Resp {
        let status = r.status();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            body,
            text,
        }
    }

    /// The error code of an error response.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// Assert the status and, for errors, the error shape with `code`.
    #[track_caller]
    pub fn expect(&self, status: u16, code: Option<&str>) -> &Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.text
        );
        if let Some(code) = code {
            assert_eq!(
                self.code(),
                code,
                "unexpected error code; body: {}",
                self.text
            );
            assert!(
                self.body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "errors carry a message: {}",
                self.text
            );
        }
        self
    }
}

/// A client of the service at `base`.
pub struct Http {
    pub base: String,
    pub http: reqwest::Client,
}

impl Http {
    pub fn new(addr: SocketAddr) -> Http {
        Http::at(&format!("http://{addr}"))
    }

    /// A client of the service at `base` (`http://host:port`).
    pub fn at(base: &str) -> Http {
        Http {
            base: base.to_string(),
            http: reqwest::Client::new(),
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        Resp::read(req.send().await.expect("request")).await
    }

    /// A request with a raw body and content type.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        content_type: &str,
        body: Vec<u8>,
    ) -> Resp {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        Resp::read(req.send().await.expect("request")).await
    }

    pub async fn get(&self, path: &str, key: &str) -> Resp {
        self.call(Method::GET, path, Some(key), None).await
    }

    pub async fn post(&self, path: &str, key: &str, body: Value) -> Resp {
        self.call(Method::POST, path, Some(key), Some(body)).await
    }

    pub async fn delete(&self, path: &str, key: &str) -> Resp {
        self.call(Method::DELETE, path, Some(key), None).await
    }

    /// Poll unauthenticated `GET path` every 100 ms until `pred` holds (within `within`).
    pub async fn until(
        &self,
        path: &str,
        within: Duration,
        what: &str,
        pred: impl Fn(&Resp) -> bool,
    ) -> Resp {
        let polled = eventually_every(within, Duration::from_millis(100), || async {
            let r = self.call(Method::GET, path, None, None).await;
            if pred(&r) {
                Ok(r)
            } else {
                Err(r)
            }
        })
        .await;
        polled.unwrap_or_else(|r| {
            panic!(
                "{path} never showed {what} within {within:?}; last: {} {}",
                r.status, r.text
            )
        })
    }
}
