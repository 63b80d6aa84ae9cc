//! The metadata server answers Gamma's `/markets?clob_token_ids=` shape: an array of markets,
//! `outcomes` and `clobTokenIds` as JSON-encoded strings, unknown ids simply absent.

use std::time::{Duration, Instant};

use pmw_sim::markets::{self, ServeOptions};
use pmw_sim::{demo_markets, TokenId};
use serde_json::Value;

async fn get(url: &str) -> Vec<Value> {
    let resp = reqwest::get(url).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    resp.json().await.unwrap()
}

#[tokio::test]
async fn markets_endpoint_has_the_gamma_shape() {
    let all = demo_markets();
    let (addr, task) = markets::serve("127.0.0.1:0".parse().unwrap(), all.clone())
        .await
        .unwrap();
    assert_ne!(addr.port(), 0);
    let base = format!("http://{addr}/markets");

    let no_token = all[2].token_ids[1];
    let yes_token = all[0].token_ids[0];
    let url =
        format!("{base}?clob_token_ids={no_token}&clob_token_ids={yes_token}&clob_token_ids=12345");
    let got = get(&url).await;
    assert_eq!(got.len(), 2, "two known ids, one unknown: {got:?}");
    for (m, v) in [(&all[0], &got[0]), (&all[2], &got[1])] {
        assert_eq!(v["question"], m.question.as_str());
        assert_eq!(v["slug"], m.slug.as_str());
        assert_eq!(v["conditionId"], m.condition_id.to_string());
        assert_eq!(v["negRisk"], m.neg_risk);
        assert_eq!(v["closed"], false);
        assert!(v["id"].is_string());
        // JSON-encoded strings, formatted as Gamma formats them.
        assert_eq!(v["outcomes"], "[\"Yes\", \"No\"]");
        let outcomes: Vec<String> = serde_json::from_str(v["outcomes"].as_str().unwrap()).unwrap();
        let ids: Vec<String> = serde_json::from_str(v["clobTokenIds"].as_str().unwrap()).unwrap();
        let ids: Vec<TokenId> = ids.iter().map(|s| s.parse().unwrap()).collect();
        assert_eq!(ids, m.token_ids);
        assert_eq!(outcomes, m.outcomes);
    }
    // Outcome name = outcomes[index of the token in clobTokenIds].
    let v = &got[1];
    let ids: Vec<String> = serde_json::from_str(v["clobTokenIds"].as_str().unwrap()).unwrap();
    let outcomes: Vec<String> = serde_json::from_str(v["outcomes"].as_str().unwrap()).unwrap();
    let i = ids.iter().position(|s| *s == no_token.to_string()).unwrap();
    assert_eq!(outcomes[i], "No");

    assert!(get(&format!("{base}?clob_token_ids=12345"))
        .await
        .is_empty());
    assert_eq!(get(&base).await.len(), all.len(), "no filter: every market");
    assert_eq!(
        get(&format!("{base}?clob_token_ids={yes_token}%2C{no_token}"))
            .await
            .len(),
        2
    );
    task.abort();
}

#[tokio::test]
async fn markets_server_can_be_slow_on_purpose() {
    let opts = ServeOptions {
        delay: Duration::from_millis(300),
    };
    let (addr, task) = markets::serve_with("127.0.0.1:0".parse().unwrap(), demo_markets(), opts)
        .await
        .unwrap();
    let t0 = Instant::now();
    let got = get(&format!("http://{addr}/markets?clob_token_ids=1")).await;
    assert!(got.is_empty());
    assert!(t0.elapsed() >= Duration::from_millis(300));
    task.abort();
}
