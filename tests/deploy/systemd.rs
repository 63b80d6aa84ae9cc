//! A real systemd service manager for the production units, although PID 1 here is not systemd:
//! Debian's systemd 252 runs as a user manager (`systemd --user`, as root) in a private mount
//! namespace whose /run/systemd is its own (so it starts at all), inside a private cgroup (in
//! the root cgroup it would move every process of the host into its `init.scope`). The units of
//! deploy/systemd are loaded as they are; one drop-in per unit changes only what is
//! host-specific (no `pmw` user here, this build's binaries, the test's environment files, the
//! services' output, and how each run ended, in files). Dropping it stops the manager (which
//! stops its units) and removes its cgroups.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use pmw_testkit::{eventually_blocking, repo_root};

/// The production units, as `systemctl` names them (the push template instantiated twice, the
/// edge template once).
pub const UNITS: &[&str] = &[
    "pmw-live@a.service",
    "pmw-push@a.service",
    "pmw-push@b.service",
    "pmw-api.service",
    "pmw-stats@a.service",
    "pmw-edge@1.service",
];

/// The restart contract as systemd's effective properties (`systemctl show`).
pub const CONTRACT: &[(&str, &str)] = &[
    ("Restart", "always"),
    ("RestartPreventExitStatus", "78"),
    ("RestartForceExitStatus", ""),
    ("SuccessExitStatus", ""),
    ("RestartUSec", "200ms"),
    ("StartLimitIntervalUSec", "0"),
    ("KillSignal", "15"),
    ("TimeoutStopUSec", "20s"),
];

/// Where `props` break [`CONTRACT`] (empty when they keep it).
pub fn violations(props: &BTreeMap<String, String>) -> Vec<String> {
    CONTRACT
        .iter()
        .filter(|(k, v)| props.get(*k).map(String::as_str) != Some(*v))
        .map(|(k, v)| format!("{k}={:?}, want {v:?}", props.get(*k)))
        .collect()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The cgroup hierarchies a systemd manager uses here: the named v1 `systemd` one (and the v2
/// `unified` one beside it) on a legacy or hybrid host, else the v2 root.
fn cgroup_roots() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    if base.join("systemd/cgroup.procs").exists() {
        let mut v = vec![base.join("systemd")];
        if base.join("unified/cgroup.procs").exists() {
            v.push(base.join("unified"));
        }
        v
    } else {
        vec![base.to_path_buf()]
    }
}

/// Every cgroup directory under `dir`, deepest first.
fn cgroup_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                cgroup_dirs(&e.path(), out);
            }
        }
    }
    out.push(dir.to_path_buf());
}

pub struct Systemd {
    pub dir: tempfile::TempDir,
    manager: Child,
    cgroups: Vec<PathBuf>,
}

impl Systemd {
    /// Start a manager and wait until `systemctl --user` reaches it.
    pub fn start() -> Systemd {
        assert!(
            is_root(),
            "the systemd tests run a real service manager (private mount namespace and cgroup): \
             run them as root, as scripts/test does in CI"
        );
        let systemd = ["/lib/systemd/systemd", "/usr/lib/systemd/systemd"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("systemd (Debian's systemd package) is installed");
        assert!(
            Path::new("/run/systemd").is_dir(),
            "/run/systemd exists to be mounted over"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in [
            "run",
            "home/.config/systemd/user",
            "runsd/system",
            "env",
            "logs",
        ] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::fs::set_permissions(
            d.join("run"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        // What PID 1 systemd keeps in /run/systemd/inaccessible: the sources of the empty mounts
        // behind ProtectHome= and friends.
        let ina = d.join("runsd/inaccessible");
        std::fs::create_dir_all(ina.join("dir")).unwrap();
        std::fs::write(ina.join("reg"), "").unwrap();
        let _ = std::os::unix::net::UnixListener::bind(ina.join("sock"));
        for args in [
            vec!["-m", "000", "fifo", "p"],
            vec!["-m", "000", "chr", "c", "0", "0"],
            vec!["-m", "000", "blk", "b", "0", "0"],
        ] {
            let _ = Command::new("mknod").args(args).current_dir(&ina).status();
        }
        let _ = Command::new("chmod")
            .args(["000", "dir", "reg", "sock"])
            .current_dir(&ina)
            .status();
        let name = format!(
            "pmw-systemd-test-{}-{}",
            std::process::id(),
            d.file_name()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches('.')
        );
        let cgroups: Vec<PathBuf> = cgroup_roots().iter().map(|r| r.join(&name)).collect();
        for c in &cgroups {
            std::fs::create_dir(c).unwrap_or_else(|e| panic!("create cgroup {c:?}: {e}"));
        }
        let out = std::fs::File::create(d.join("manager.out")).unwrap();
        // Arguments, not environment: the manager's environment is passed on to every service.
        let script = r#"set -e
runsd="$1" systemd="$2"
shift 2
for cg in "$@"; do echo $$ > "$cg/cgroup.procs"; done
mount --bind "$runsd" /run/systemd
exec "$systemd" --user"#;
        let manager = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(d.join("runsd"))
            .arg(systemd)
            .args(&cgroups)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", d.join("home"))
            .env("XDG_RUNTIME_DIR", d.join("run"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("unshare (util-linux)");
        let mut sd = Systemd {
            dir,
            manager,
            cgroups,
        };
        let answered =
            eventually_blocking(Duration::from_secs(30), Duration::from_millis(50), || {
                let up = sd.systemctl(&["show-environment"]).status.success();
                if let (false, Ok(Some(status))) = (up, sd.manager.try_wait()) {
                    panic!("systemd --user exited ({status}): {}", sd.diagnostics());
                }
                up
            });
        assert!(
            answered,
            "systemd --user never answered: {}",
            sd.diagnostics()
        );
        sd
    }

    /// How each run of `unit` ended, as systemd classified it: `$SERVICE_RESULT $EXIT_CODE
    /// $EXIT_STATUS` (e.g. `signal killed KILL`, `exit-code exited 75`), recorded by the host
    /// drop-in's `ExecStopPost=` (this manager has no journal to read them from).
    pub fn exits(&self, unit: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join(format!("logs/{unit}.exits")))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Everything that helps with a failure: the manager's log and output, each unit's status
    /// and the tail of its service's output.
    pub fn diagnostics(&self) -> String {
        let mut out = format!(
            "manager output:\n{}\n",
            std::fs::read_to_string(self.dir.path().join("manager.out")).unwrap_or_default()
        );
        for unit in UNITS {
            let status = self.systemctl(&["status", "--no-pager", unit]);
            out += &format!(
                "--- {unit}\n{}\nexits: {:?}\n{}\n",
                String::from_utf8_lossy(&status.stdout),
                self.exits(unit),
                self.unit_log(unit)
            );
        }
        out
    }

    /// The last lines a unit's service wrote (stdout and stderr).
    pub fn unit_log(&self, unit: &str) -> String {
        let text = std::fs::read_to_string(self.dir.path().join(format!("logs/{unit}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    pub fn env_dir(&self) -> PathBuf {
        self.dir.path().join("env")
    }

    fn unit_dir(&self) -> PathBuf {
        self.dir.path().join("home/.config/systemd/user")
    }

    pub fn systemctl(&self, args: &[&str]) -> Output {
        Command::new("systemctl")
            .arg("--user")
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", self.dir.path().join("home"))
            .env("XDG_RUNTIME_DIR", self.dir.path().join("run"))
            .stdin(Stdio::null())
            .output()
            .expect("systemctl")
    }

    #[track_caller]
    pub fn ok(&self, args: &[&str]) {
        let out = self.systemctl(args);
        assert!(
            out.status.success(),
            "systemctl --user {args:?}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            self.diagnostics()
        );
    }

    /// Every property of `unit`, as `systemctl show` prints it.
    pub fn show(&self, unit: &str) -> BTreeMap<String, String> {
        let out = self.systemctl(&["show", "--all", unit]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Copy deploy/systemd's units in unchanged, with the host drop-ins, and load them.
    pub fn install_units(&self) {
        let bin = repo_root().join("target/debug");
        let env = self.env_dir();
        for e in std::fs::read_dir(repo_root().join("deploy/systemd")).unwrap() {
            let path = e.unwrap().path();
            let file = path.file_name().unwrap().to_string_lossy().to_string();
            if !file.ends_with(".service") {
                continue;
            }
            std::fs::copy(&path, self.unit_dir().join(&file)).unwrap();
            let exe = file.trim_end_matches(".service").trim_end_matches('@');
            // A template's own file, as in production: pmw-push@ reads push-%i.env, pmw-edge@
            // edge-%i.env.
            let per_instance = match exe.strip_prefix("pmw-") {
                Some(kind) if file.contains('@') => {
                    format!("EnvironmentFile={}/{kind}-%i.env\n", env.display())
                }
                _ => String::new(),
            };
            self.drop_in(
                &file,
                "10-host",
                &format!(
                    "# This host: no pmw user, this build's binaries, the test's environment and logs.\n\
                     [Service]\nUser=\nGroup=\nEnvironmentFile=\n\
                     EnvironmentFile={}/pmw.env\n{per_instance}ExecStart=\nExecStart={bin}/{exe}\n\
                     # The units' own sandbox (PrivateTmp=, ProtectHome=) hides a checkout under\n\
                     # /tmp or a home directory: this build's binaries are bound in, read-only.\n\
                     BindReadOnlyPaths={bin}\n\
                     StandardOutput=append:{logs}/%n.log\nStandardError=inherit\n\
                     ExecStopPost=+/bin/sh -c 'echo \"$$SERVICE_RESULT $$EXIT_CODE $$EXIT_STATUS\" >> {logs}/%n.exits'\n",
                    env.display(),
                    bin = bin.display(),
                    logs = self.dir.path().join("logs").display()
                ),
            );
        }
        self.ok(&["daemon-reload"]);
    }

    /// Write `<unit>.d/<name>.conf` (load it with `daemon-reload`).
    pub fn drop_in(&self, unit: &str, name: &str, text: &str) {
        let dir = self.unit_dir().join(format!("{unit}.d"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.conf")), text).unwrap();
    }

    pub fn remove_drop_in(&self, unit: &str, name: &str) {
        let _ = std::fs::remove_file(self.unit_dir().join(format!("{unit}.d/{name}.conf")));
    }

    /// Install a unit file of the test's own (e.g. a broken copy of a production unit).
    pub fn write_unit(&self, file: &str, text: &str) {
        std::fs::write(self.unit_dir().join(file), text).unwrap();
    }
}

/// Write an environment file (`KEY="value"` lines).
pub fn write_env(path: &Path, vars: &[(String, String)]) {
    let text: String = vars
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"\n", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    std::fs::write(path, text).unwrap();
    // As in production (docs/OPERATIONS.md, "Unit hardening"): they hold secrets.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
}

impl Drop for Systemd {
    fn drop(&mut self) {
        // SIGTERM makes a user manager start exit.target: it stops every unit, then exits.
        let pid = self.manager.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        eventually_blocking(Duration::from_secs(45), Duration::from_millis(50), || {
            !matches!(self.manager.try_wait(), Ok(None))
        });
        let _ = self.manager.kill();
        let _ = self.manager.wait();
        // Nothing should be left; whatever is, is ours: killed, then the cgroups removed.
        for root in &self.cgroups {
            let mut dirs = Vec::new();
            cgroup_dirs(root, &mut dirs);
            for d in &dirs {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                for p in procs.split_whitespace() {
                    let _ = Command::new("kill").args(["-KILL", p]).status();
                }
            }
            for _ in 0..50 {
                if dirs
                    .iter()
                    .all(|d| std::fs::remove_dir(d).is_ok() || !d.exists())
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}
