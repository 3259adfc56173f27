//! A real PostgreSQL server for tests: `initdb` into a temp dir, `pg_ctl start` on a free port of
//! 127.0.0.1 (password auth over TCP, a generated password), stopped (`-m immediate`) on drop.
//! Test-only: nothing here ships.
//!
//! The binaries are found through `SIGX_PG_BIN` (a directory), then `PATH`, then the newest
//! `/usr/lib/postgresql/*/bin` (Debian's layout); `scripts/install-tools.sh postgres` installs
//! them. PostgreSQL refuses to run as root, so when the tests run as root (CI here does) the
//! server runs as `nobody`: the temp dir is handed to it (chown) and the commands are spawned
//! with its uid and gid (`CommandExt::uid`/`gid`, no sudo or runuser needed).
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The superuser the harness creates.
pub const SUPERUSER: &str = "sigx";

/// A running server; stopped when dropped.
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    password: String,
    run_as: Option<(u32, u32)>,
}

fn find_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os("SIGX_PG_BIN") {
        return PathBuf::from(dir);
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        if dir.join("pg_ctl").is_file() && dir.join("initdb").is_file() {
            return dir;
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "PostgreSQL's initdb and pg_ctl were not found (SIGX_PG_BIN, PATH, \
             /usr/lib/postgresql/*/bin); install them with `bash scripts/install-tools.sh postgres`"
        )
    })
}

/// `nobody`'s uid and gid when we are root (PostgreSQL will not run as root).
fn unprivileged() -> Option<(u32, u32)> {
    let uid = std::fs::metadata("/proc/self").map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid()
    });
    if uid.ok()? != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let ids = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&"nobody")).then(|| (f[2].parse().ok(), f[3].parse().ok()))
    });
    match ids {
        Some((Some(u), Some(g))) => Some((u, g)),
        _ => Some((65534, 65534)),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl PgServer {
    /// Creates a cluster and starts it.
    pub fn start() -> PgServer {
        let run_as = unprivileged();
        // Under root the dir must be reachable by `nobody`: /tmp, not a private TMPDIR.
        let dir = match run_as {
            Some(_) => tempfile::Builder::new()
                .prefix("sigx-pg")
                .tempdir_in("/tmp"),
            None => tempfile::Builder::new().prefix("sigx-pg").tempdir(),
        }
        .unwrap();
        use rand::RngExt;
        let password = format!("pw{:016x}", rand::rng().random::<u64>());
        let server = PgServer {
            bin: find_bin(),
            port: free_port(),
            password,
            run_as,
            dir,
        };
        std::fs::write(server.dir.path().join("pwfile"), &server.password).unwrap();
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(server.dir.path(), Some(uid), Some(gid)).unwrap();
            std::os::unix::fs::chown(server.dir.path().join("pwfile"), Some(uid), Some(gid))
                .unwrap();
        }
        let data = server.data();
        let pwfile = server.dir.path().join("pwfile");
        server.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                SUPERUSER.as_ref(),
                "--pwfile".as_ref(),
                pwfile.as_os_str(),
                "--auth-host=scram-sha-256".as_ref(),
                "--auth-local=trust".as_ref(),
                "--locale=C".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--no-sync".as_ref(),
            ],
        );
        // The free port may be taken between probing it and the server binding it (tests run
        // in parallel): then try another.
        let mut server = server;
        for attempt in 1.. {
            match server.try_resume() {
                Ok(()) => break,
                Err(e) if attempt < 3 => {
                    eprintln!(
                        "postgres did not start on port {}: {e}; retrying",
                        server.port
                    );
                    server.port = free_port();
                }
                Err(e) => panic!("{e}"),
            }
        }
        server
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn run(&self, tool: &str, args: &[&std::ffi::OsStr]) -> Output {
        self.try_run(tool, args).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_run(&self, tool: &str, args: &[&std::ffi::OsStr]) -> Result<Output, String> {
        let mut cmd = Command::new(self.bin.join(tool));
        cmd.args(args).current_dir(self.dir.path());
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid).env("HOME", self.dir.path());
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.join(tool).display()));
        if !out.status.success() {
            return Err(format!(
                "{tool} failed ({}): {}{}\nserver log: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
            ));
        }
        Ok(out)
    }

    /// Starts the (stopped) server again on its port and waits until it accepts connections.
    pub fn resume(&self) {
        self.try_resume().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_resume(&self) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let (data, log) = (self.data(), self.dir.path().join("log"));
        self.try_run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                "60".as_ref(),
                "-o".as_ref(),
                opts.as_ref(),
                "start".as_ref(),
            ],
        )
        .map(drop)
    }

    /// Stops the server at once (`-m immediate`: like a crash, no checkpoint).
    pub fn halt(&self) {
        let data = self.data();
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        );
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The superuser's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A URL DSN for `user`/`password` on database `db`.
    pub fn dsn_as(&self, user: &str, password: &str, db: &str) -> String {
        format!("postgres://{user}:{password}@127.0.0.1:{}/{db}", self.port)
    }

    /// The superuser's DSN for `db`.
    pub fn dsn(&self, db: &str) -> String {
        self.dsn_as(SUPERUSER, &self.password, db)
    }

    /// Runs `sql` as the superuser on `db`.
    pub async fn sql(&self, db: &str, sql: &str) {
        let (client, conn) = tokio_postgres::connect(&self.dsn(db), tokio_postgres::NoTls)
            .await
            .expect("connect as the superuser");
        let driver = tokio::spawn(conn);
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        drop(client);
        let _ = driver.await;
    }

    /// Creates database `name` and answers the superuser's DSN for it.
    pub async fn create_database(&self, name: &str) -> String {
        self.sql("postgres", &format!("CREATE DATABASE {name}"))
            .await;
        self.dsn(name)
    }

    /// The temp dir (data in `data/`, the log in `log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let mut cmd = Command::new(self.bin.join("pg_ctl"));
        cmd.arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .current_dir(self.dir.path());
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        let _ = cmd.output();
    }
}
