//! The stack harness shared by the cross-service tests (`tests/`), the drills and the operator
//! tools (`pmw-check`, `pmw-bench`), all on the real local stack started by `scripts/stack` (see
//! `pmw-testkit`): a private database and chain with the simulator ([`chain`]), which the e2e
//! tests run the services on in-process and the drills and `pmw-check` under pm2 behind Caddy
//! ([`harness`]); the drills' resuming clients ([`clients`]); and a drill's verdict, printed and
//! recorded in docs/OPERATIONS.md ([`verdict`], [`record`]).

pub mod chain;
pub mod clients;
pub mod edge;
pub mod ha_hosts;
pub mod ha_nats;
pub mod harness;
pub mod placed;
pub mod pm2;

use std::time::Duration;

/// A drill's verdict line: printed as `{title} drill: {figures}` and recorded in docs/OPERATIONS.md
/// under the drill's markers `drill` ([`record`]).
pub fn verdict(title: &str, drill: &str, figures: &str) {
    println!("{title} drill: {figures}");
    record(drill, figures);
}

/// Write a drill's figures into docs/OPERATIONS.md between its markers (the doc's figures are
/// written by the drill run, never by hand). A lock file serialises concurrent drills.
pub fn record(drill: &str, figures: &str) {
    let doc = pmw_testkit::repo_root().join("docs/OPERATIONS.md");
    let lock = pmw_testkit::repo_root().join("docs/.OPERATIONS.md.lock");
    let taken = pmw_testkit::eventually_blocking(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)
                .is_ok()
        },
    );
    assert!(taken, "docs lock held too long");
    let result = (|| {
        let text = std::fs::read_to_string(&doc).ok()?;
        let (begin, end) = (
            format!("<!-- drill:{drill} -->"),
            format!("<!-- /drill:{drill} -->"),
        );
        let a = text.find(&begin)? + begin.len();
        let b = text.find(&end)?;
        let when = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC");
        let rev = std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(pmw_testkit::repo_root())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let updated = format!(
            "{}\n{figures} (measured {when}, rev {rev})\n{}",
            &text[..a],
            &text[b..]
        );
        std::fs::write(&doc, updated).ok()
    })();
    let _ = std::fs::remove_file(&lock);
    assert!(
        result.is_some(),
        "docs/OPERATIONS.md lacks the markers for drill {drill}"
    );
}

/// Send `sig` (`KILL`, `SEGV`, …) to process `pid`. A SIGSEGV sent with kill(2) is delivered
/// twice: the Rust runtime's stack-overflow handler takes the first one that is not a real fault,
/// puts the default action back and returns (a real fault would re-raise at once), so only the
/// second kills, as a real segfault does.
#[track_caller]
pub fn kill(pid: i64, sig: &str) {
    assert!(pid > 0, "no pid to signal");
    let send = || {
        std::process::Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(send(), "kill -{sig} {pid}");
    if sig == "SEGV" {
        std::thread::sleep(Duration::from_millis(200));
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            send();
        }
    }
}
