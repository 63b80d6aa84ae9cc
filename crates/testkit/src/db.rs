//! A private Postgres database and ClickHouse database per test, migrated through the production
//! migration code, dropped when the test ends.

use figment::providers::Serialized;
use figment::Figment;
use pmw_core::ch::{self, ChClient};
use pmw_core::config::{self, CoreConfig};
use pmw_core::migrate;
use pmw_core::pg::{self, PgPool};
use rand::Rng;
use tokio_postgres::NoTls;

use crate::stack::{stack_env, StackEnv};
use crate::TcpProxy;

/// One test's databases. Dropped (with `FORCE`) when this value is dropped.
pub struct TestDb {
    pub name: String,
    pub cfg: CoreConfig,
    pub pg: PgPool,
    pub ch: ChClient,
    admin_url: String,
    stack: StackEnv,
}

impl TestDb {
    /// Fresh databases with every migration applied.
    pub async fn new() -> TestDb {
        TestDb::new_on(stack_env()).await
    }

    /// Fresh migrated databases on another stack (e.g. a [`crate::PrivateStack`]).
    pub async fn new_on(env: &StackEnv) -> TestDb {
        let db = TestDb::empty_on(env).await;
        let mut client = db.connect().await;
        migrate::migrate_all(&mut client, &db.ch)
            .await
            .expect("migrations apply to empty databases");
        db
    }

    /// Fresh, empty databases (no migrations): for migration and schema-guard tests.
    pub async fn empty() -> TestDb {
        TestDb::empty_on(stack_env()).await
    }

    /// Fresh, empty databases on `env`'s stack.
    pub async fn empty_on(env: &StackEnv) -> TestDb {
        pmw_core::telemetry::init_for_tests();
        let admin_url = env.get("PMW_POSTGRES_URL").to_string();
        let name = format!(
            "t_{}_{:08x}",
            std::process::id(),
            rand::thread_rng().gen::<u32>()
        );
        let (admin, conn) = tokio_postgres::connect(&admin_url, NoTls)
            .await
            .expect("connect to the stack's postgres");
        tokio::spawn(conn);
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        let base = admin_url.rsplit_once('/').expect("url has a database").0;
        let cfg: CoreConfig = config::load_from(
            Figment::new()
                .merge(Serialized::default(
                    "postgres_url",
                    format!("{base}/{name}"),
                ))
                .merge(Serialized::default("postgres_pool_size", 8))
                // The HA stack: sessions go only to the member Patroni names primary.
                .merge(Serialized::default(
                    "postgres_patroni_urls",
                    env.vars.get("PMW_POSTGRES_PATRONI_URLS"),
                ))
                .merge(Serialized::default(
                    "clickhouse_url",
                    env.get("PMW_CLICKHOUSE_URL"),
                ))
                .merge(Serialized::default("clickhouse_database", &name))
                .merge(Serialized::default("rpc_ws_url", env.get("PMW_RPC_WS_URL")))
                .merge(Serialized::default(
                    "rpc_http_url",
                    env.get("PMW_RPC_HTTP_URL"),
                )),
        )
        .expect("test config is valid");
        ch::server_client(&cfg)
            .query(&format!("CREATE DATABASE {name}"))
            .execute()
            .await
            .expect("create clickhouse test database");
        let pg = pg::pool(&cfg, "pmw-test").expect("pool");
        let ch = ch::client(&cfg);
        TestDb {
            name,
            cfg,
            pg,
            ch,
            admin_url,
            stack: env.clone(),
        }
    }

    /// A new unpooled connection to the test database.
    pub async fn connect(&self) -> tokio_postgres::Client {
        self.try_connect().await.expect("connect to test database")
    }

    /// [`TestDb::connect`], or why not (on Patroni, no node takes writes during a failover).
    pub async fn try_connect(&self) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, conn) = self.cfg.postgres().connect(NoTls).await?;
        tokio::spawn(conn);
        Ok(client)
    }

    /// These databases' settings with Postgres reached through a [`TcpProxy`] the test can cut,
    /// and the proxy.
    pub async fn behind_proxy(&self) -> (CoreConfig, TcpProxy) {
        use secrecy::{ExposeSecret, SecretString};
        let pg_port = self.cfg.postgres().get_ports()[0];
        let proxy = TcpProxy::start(format!("127.0.0.1:{pg_port}").parse().expect("addr")).await;
        let mut cfg = self.cfg.clone();
        cfg.postgres_url = SecretString::from(
            cfg.postgres_url
                .expose_secret()
                .replace(&format!(":{pg_port}/"), &format!(":{}/", proxy.addr.port())),
        );
        (cfg, proxy)
    }

    /// Environment variables that point a child process at these databases, with the stack's
    /// dev operator key (`PMW_SECRET_KEYS`): the shipped units and the pm2 ecosystem run with
    /// `PMW_ENV=production`, which refuses to start without one.
    pub fn env(&self) -> Vec<(String, String)> {
        let env = &self.stack;
        let base = self.admin_url.rsplit_once('/').expect("url").0;
        vec![
            ("PMW_POSTGRES_URL".into(), format!("{base}/{}", self.name)),
            (
                "PMW_CLICKHOUSE_URL".into(),
                env.get("PMW_CLICKHOUSE_URL").into(),
            ),
            ("PMW_CLICKHOUSE_DATABASE".into(), self.name.clone()),
            ("PMW_RPC_WS_URL".into(), env.get("PMW_RPC_WS_URL").into()),
            (
                "PMW_RPC_HTTP_URL".into(),
                env.get("PMW_RPC_HTTP_URL").into(),
            ),
            (
                pmw_core::sealed::ENV.into(),
                env.get(pmw_core::sealed::ENV).into(),
            ),
        ]
        .into_iter()
        // The HA stack: sessions go only to the member Patroni names primary.
        .chain(
            env.vars
                .get("PMW_POSTGRES_PATRONI_URLS")
                .map(|u| ("PMW_POSTGRES_PATRONI_URLS".into(), u.clone())),
        )
        .collect()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let admin_url = self.admin_url.clone();
        let cfg = self.cfg.clone();
        // Drop runs inside the test's runtime: clean up on a thread with its own runtime.
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            rt.block_on(async move {
                if let Ok((admin, conn)) = tokio_postgres::connect(&admin_url, NoTls).await {
                    tokio::spawn(conn);
                    if let Err(e) = admin
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await
                    {
                        eprintln!("testkit: could not drop postgres database {name}: {e}");
                    }
                }
                if let Err(e) = ch::server_client(&cfg)
                    .query(&format!("DROP DATABASE IF EXISTS {name}"))
                    .execute()
                    .await
                {
                    eprintln!("testkit: could not drop clickhouse database {name}: {e}");
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// The first column of every row `sql` returns (a test's read of a table as it is).
pub async fn column<T>(c: &tokio_postgres::Client, sql: &str) -> Vec<T>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    c.query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}
