//! gpufleet on PostgreSQL, through the binary: what a wrong URL, password or database says, and
//! commands that write and read through a `postgres://` `--db`.
//!
//! Needs a cluster whose admin URL is in `GPUFLEET_TEST_POSTGRES` (`ci/postgres.sh start DIR`
//! prints one; there, roles other than `gpufleet` must give a password). Without it each test
//! says why it skips, unless `GPUFLEET_REQUIRE` names `postgres`.

mod common;

use std::path::Path;
use std::process::Output;

use common::{gpufleet, ok_stdout};

/// The cluster's admin URL, or `None` (after saying why) when there is none.
fn cluster() -> Option<String> {
    match std::env::var("GPUFLEET_TEST_POSTGRES") {
        Ok(url) => Some(url),
        Err(_) => {
            let required = std::env::var("GPUFLEET_REQUIRE")
                .is_ok_and(|v| v.split(',').any(|b| b.trim() == "postgres"));
            assert!(
                !required,
                "GPUFLEET_REQUIRE names postgres but GPUFLEET_TEST_POSTGRES is not set"
            );
            eprintln!(
                "skipping: GPUFLEET_TEST_POSTGRES is not set (ci/postgres.sh starts a cluster)"
            );
            None
        }
    }
}

/// A database made for one test, dropped at its end.
struct TestDb {
    admin: String,
    name: String,
}

impl TestDb {
    fn create(admin: &str, tag: &str) -> TestDb {
        let name = format!("gpufleet_it_{tag}_{}", std::process::id());
        run_sql(
            admin,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
        run_sql(admin, &format!("CREATE DATABASE {name}"));
        TestDb {
            admin: admin.to_owned(),
            name,
        }
    }

    /// Its URL, as the admin user.
    fn url(&self) -> String {
        with_db(&self.admin, &self.name)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        run_sql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

fn run_sql(url: &str, sql: &str) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client.batch_execute(sql).unwrap();
}

/// `url` with its database replaced.
fn with_db(url: &str, db: &str) -> String {
    let at = url.rfind('/').unwrap();
    format!("{}/{db}", &url[..at])
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `gpufleet --db URL ARGS` with `PGPASSWORD` set or cleared.
fn with_password(url: &str, password: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpufleet"));
    cmd.arg("--db").arg(url).args(args).env_remove("PGPASSFILE");
    match password {
        Some(p) => cmd.env("PGPASSWORD", p),
        None => cmd.env_remove("PGPASSWORD"),
    };
    cmd.output().unwrap()
}

#[test]
fn refusals_say_which_and_never_show_the_password() {
    let Some(admin) = cluster() else { return };
    let db = TestDb::create(&admin, "refusals");
    let role = format!("gpufleet_pw_{}", std::process::id());
    run_sql(
        &admin,
        &format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD 'right-pw'"),
    );
    run_sql(
        &admin,
        &format!("GRANT ALL ON DATABASE {} TO {role}", db.name),
    );
    let host = admin
        .trim_start_matches("postgres://")
        .split_once('@')
        .unwrap()
        .1
        .split('/')
        .next()
        .unwrap()
        .to_owned();

    // A wrong password, in the URL and in PGPASSWORD.
    let url = format!("postgres://{role}:wr0ng-s3cret@{host}/{}", db.name);
    let out = with_password(&url, None, &["campaigns"]);
    let text = stderr(&out);
    assert!(!out.status.success());
    assert!(text.contains("refused the password"), "{text}");
    assert!(text.contains("came from the URL"), "{text}");
    assert!(
        !text.contains("wr0ng-s3cret"),
        "the password is shown: {text}"
    );
    let url = format!("postgres://{role}@{host}/{}", db.name);
    let out = with_password(&url, Some("wr0ng-s3cret"), &["campaigns"]);
    let text = stderr(&out);
    assert!(
        text.contains("refused the password") && text.contains("PGPASSWORD"),
        "{text}"
    );
    assert!(!text.contains("wr0ng-s3cret"), "{text}");
    // None at all.
    let out = with_password(&url, None, &["campaigns"]);
    assert!(
        stderr(&out).contains("wants a password"),
        "{}",
        stderr(&out)
    );
    // The right one works (an empty database: a reader says there is nothing yet).
    let out = with_password(&url, Some("right-pw"), &["campaigns"]);
    assert!(
        stderr(&out).contains("no gpufleet schema"),
        "{}",
        stderr(&out)
    );

    // A host nobody listens on.
    let out = with_password(
        "postgres://u:pw-not-shown@127.0.0.1:1/x",
        None,
        &["campaigns"],
    );
    let text = stderr(&out);
    assert!(!out.status.success());
    assert!(text.contains("cannot reach the server"), "{text}");
    assert!(!text.contains("pw-not-shown"), "{text}");

    // A database that does not exist.
    let out = gpufleet(
        Path::new(&with_db(&admin, "gpufleet_no_such_db")),
        &["campaigns"],
    );
    assert!(
        stderr(&out).contains("has no database \"gpufleet_no_such_db\""),
        "{}",
        stderr(&out)
    );

    // Another application's database is refused, and left as it was.
    let foreign = TestDb::create(&admin, "foreign");
    run_sql(
        &foreign.url(),
        "CREATE TABLE visits (url text); INSERT INTO visits VALUES ('x')",
    );
    for args in [
        &["campaigns"][..],
        &["agents", "add", "a", "http://h:1"][..],
    ] {
        let out = gpufleet(Path::new(&foreign.url()), args);
        let text = stderr(&out);
        assert!(!out.status.success(), "{args:?}");
        assert!(text.contains("is not a gpufleet database"), "{text}");
        assert!(
            text.contains("1 table but no gpufleet schema version"),
            "{text}"
        );
    }
    let mut client = postgres::Client::connect(&foreign.url(), postgres::NoTls).unwrap();
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "nothing was created in it");
    drop(db);
    run_sql(&admin, &format!("DROP ROLE IF EXISTS {role}"));
}

#[test]
fn commands_write_and_read_through_a_postgres_url() {
    let Some(admin) = cluster() else { return };
    let db = TestDb::create(&admin, "cli");
    let url = db.url();
    let url = Path::new(&url);
    ok_stdout(&gpufleet(
        url,
        &["agents", "add", "rig", "http://127.0.0.1:1"],
    ));
    let listed = ok_stdout(&gpufleet(url, &["agents", "list", "--json"]));
    assert!(listed.contains("\"rig\""), "{listed}");
    // A second process sees the same store; a backup is SQLite's and says what to use instead.
    let out = gpufleet(url, &["db", "backup", "/tmp/never-written.db"]);
    assert!(stderr(&out).contains("pg_dump"), "{}", stderr(&out));
    assert!(!Path::new("/tmp/never-written.db").exists());
    let out = gpufleet(url, &["db", "restore", "/tmp/whatever.db"]);
    assert!(stderr(&out).contains("pg_restore"), "{}", stderr(&out));
}
