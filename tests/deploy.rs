//! The deployment files are real and consistent: systemd units pass `systemd-analyze verify`
//! (and a broken one does not), encode the exit-code contract and stop timeouts longer than
//! push's round deadline; the pm2 ecosystem (evaluated by node) encodes the same policy; the
//! Caddyfile validates with the real Caddy.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    pmw_testkit::repo_root()
}

fn units() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/systemd"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    v.sort();
    v
}

/// Copy the units into `dir`, pointing ExecStart at this build's binaries, instantiating the
/// push template as push@a. Returns the unit file names to verify.
fn stage(dir: &Path, mutate: impl Fn(String) -> String) -> Vec<String> {
    let bin = root().join("target/debug");
    let mut names = Vec::new();
    for u in units() {
        let text = std::fs::read_to_string(&u)
            .unwrap()
            .replace("/usr/local/lib/pmw/bin", bin.to_str().unwrap());
        let text = mutate(text);
        let name = u
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace("@.service", "@a.service");
        std::fs::write(dir.join(&name), text).unwrap();
        names.push(name);
    }
    names
}

fn verify(dir: &Path, names: &[String]) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg("--man=no")
        .args(names)
        .current_dir(dir)
        .output()
        .expect("systemd-analyze (Debian systemd) is installed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && !text.contains(".service:"), text)
}

#[test]
fn systemd_units_verify_and_encode_the_exit_code_contract() {
    let bins = ["pmw-live", "pmw-push", "pmw-api", "pmw-stats"];
    for b in bins {
        assert!(
            root().join("target/debug").join(b).exists(),
            "{b} is built (cargo builds workspace binaries for tests)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let names = stage(dir.path(), |t| t);
    assert_eq!(names.len(), 4, "{names:?}");
    let (ok, text) = verify(dir.path(), &names);
    assert!(ok, "systemd-analyze verify: {text}");
    for u in units() {
        let t = std::fs::read_to_string(&u).unwrap();
        assert!(
            t.contains("RestartPreventExitStatus=78"),
            "{u:?} must never restart a 78"
        );
        assert!(
            t.contains("Restart=on-failure"),
            "{u:?} restarts 75 and bugs"
        );
        assert!(t.contains("KillSignal=SIGTERM"), "{u:?}");
        let stop: u64 = t
            .lines()
            .find_map(|l| l.strip_prefix("TimeoutStopSec="))
            .unwrap_or_else(|| panic!("{u:?} sets TimeoutStopSec"))
            .parse()
            .unwrap();
        assert!(
            stop > 10,
            "{u:?}: stop timeout {stop}s must exceed push's 10 s round deadline"
        );
    }

    // The check can fail: a broken unit is reported.
    let broken = tempfile::tempdir().unwrap();
    let names = stage(broken.path(), |t| {
        t.replace("Restart=on-failure", "Restart=sometimes")
            .replace("Type=exec", "Type=bogus")
    });
    let (ok, text) = verify(broken.path(), &names);
    assert!(!ok, "a broken unit must fail verification: {text}");
}

#[test]
fn pm2_ecosystem_encodes_the_same_policy() {
    let script = r#"
        process.env.PMW_BIN_DIR = '/opt/pmw/bin';
        const e = require(process.argv[1]);
        console.log(JSON.stringify(e.apps));
    "#;
    let out = Command::new("node")
        .arg("-e")
        .arg(script)
        .arg(root().join("deploy/pm2/ecosystem.config.js"))
        .output()
        .expect("node is installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let apps: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = apps.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "pmw-live",
            "pmw-push-a",
            "pmw-push-b",
            "pmw-api",
            "pmw-stats"
        ]
    );
    for a in &apps {
        let codes: Vec<i64> = a["stop_exit_codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_i64().unwrap())
            .collect();
        assert!(
            codes.contains(&78) && codes.contains(&0) && !codes.contains(&75),
            "{a}"
        );
        assert!(a["kill_timeout"].as_i64().unwrap() > 10_000, "{a}");
        assert_eq!(a["kill_signal"], "SIGTERM");
        assert!(
            a["script"].as_str().unwrap().starts_with("/opt/pmw/bin/"),
            "{a}"
        );
    }
    assert_ne!(
        apps[1]["env"]["PMW_PUSH_LISTEN"], apps[2]["env"]["PMW_PUSH_LISTEN"],
        "push-a and push-b listen apart"
    );
}

#[test]
fn caddyfile_validates_with_real_caddy() {
    let out = Command::new("caddy")
        .args(["validate", "--adapter", "caddyfile", "--config"])
        .arg(root().join("caddy/Caddyfile"))
        .env("PMW_SITE", "http://127.0.0.1:18443")
        .output()
        .expect("caddy (Debian) is installed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let caddyfile = std::fs::read_to_string(root().join("caddy/Caddyfile")).unwrap();
    for needle in [
        "lb_policy first",
        "lb_try_duration",
        "fail_duration",
        "/v1/ws",
        "/latency",
    ] {
        assert!(
            caddyfile.contains(needle),
            "Caddyfile must configure {needle}"
        );
    }
}
