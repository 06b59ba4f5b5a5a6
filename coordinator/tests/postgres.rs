//! gpufleet on PostgreSQL, through the binary: what a wrong URL, password or database says, and
//! commands that write and read through a `postgres://` `--db`.
//!
//! Needs a cluster whose admin URL is in `GPUFLEET_TEST_POSTGRES` (`ci/postgres.sh start DIR`
//! prints one; there, roles other than `gpufleet` must give a password). Without it each test
//! says why it skips, unless `GPUFLEET_REQUIRE` names `postgres`. `schema` proves the two
//! engines' migrations make the same schema.

mod common;
#[path = "postgres/outage.rs"]
mod outage;
#[path = "postgres/schema.rs"]
mod schema;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{
    BIN, FLEET_SERVE, Proc, Quiet, Serve, dial_url, enrol, gpufleet, ok_stdout, wait_for,
};
use gpufleet_coordinator::db::Db;
use gpufleet_coordinator::schedule::{Daemon, DaemonConfig};
use std::sync::Arc;

/// The cluster's admin URL, or `None` (after saying why) when there is none.
fn cluster() -> Option<String> {
    from_env("GPUFLEET_TEST_POSTGRES", "ci/postgres.sh starts a cluster")
}

/// The variable `name`, or `None` after saying why the test skips (`made_by`: where a value comes
/// from); a missing one fails instead when `GPUFLEET_REQUIRE` names postgres.
fn from_env(name: &str, made_by: &str) -> Option<String> {
    if let Ok(value) = std::env::var(name) {
        return Some(value);
    }
    let required = std::env::var("GPUFLEET_REQUIRE")
        .is_ok_and(|v| v.split(',').any(|b| b.trim() == "postgres"));
    assert!(
        !required,
        "GPUFLEET_REQUIRE names postgres but {name} is not set"
    );
    eprintln!("skipping: {name} is not set ({made_by})");
    None
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

/// The rows `sql` returns, as text.
fn rows(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client
        .simple_query(sql)
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

/// One number `sql` returns.
fn number(url: &str, sql: &str) -> i64 {
    rows(url, sql)[0][0].as_deref().unwrap().parse().unwrap()
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

/// The CA of the cluster's TLS certificate (`GPUFLEET_TEST_POSTGRES_CA`, which `.ci/run` sets to
/// what `ci/postgres.sh` made), or `None` (after saying why).
fn cluster_ca() -> Option<String> {
    from_env("GPUFLEET_TEST_POSTGRES_CA", "ci/postgres.sh makes one")
}

/// TLS to the database with `sslmode` as libpq spells it, against the throwaway cluster: its
/// certificate names `localhost` and is signed by a CA of its own, and its role `gpufleet_tls`
/// may log in over TLS only, so a command that works as that role went over TLS.
#[test]
fn tls_to_the_database_follows_sslmode() {
    let Some(admin) = cluster() else { return };
    let Some(ca) = cluster_ca() else { return };
    let db = TestDb::create(&admin, "tls");
    run_sql(
        &admin,
        "DO $$ BEGIN CREATE ROLE gpufleet_tls LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
    );
    run_sql(
        &admin,
        &format!("ALTER DATABASE {} OWNER TO gpufleet_tls", db.name),
    );
    let as_tls = db.url().replacen("gpufleet@", "gpufleet_tls@", 1);
    let by_name = as_tls.replacen("127.0.0.1", "localhost", 1);
    let other_ca = tempfile::NamedTempFile::new().unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(other_ca.path(), other.cert.pem()).unwrap();
    let other_ca = other_ca.path().display().to_string();
    let add = |url: &str, agent: &str| {
        gpufleet(
            Path::new(url),
            &["agents", "add", agent, "http://127.0.0.1:1"],
        )
    };
    // What works: TLS unchecked (require, and prefer, the default, with a server that offers
    // it), the chain checked (verify-ca, at the address), the chain and the name (verify-full).
    for (n, url) in [
        format!("{as_tls}?sslmode=require"),
        as_tls.clone(),
        format!("{as_tls}?sslmode=verify-ca&sslrootcert={ca}"),
        format!("{by_name}?sslmode=verify-full&sslrootcert={ca}"),
    ]
    .iter()
    .enumerate()
    {
        ok_stdout(&add(url, &format!("rig{n}")));
    }
    let listed = ok_stdout(&gpufleet(Path::new(&as_tls), &["agents", "list", "--json"]));
    assert_eq!(listed.matches("\"rig").count(), 4, "{listed}");
    // What is refused, each saying why.
    for (url, says) in [
        (
            format!("{as_tls}?sslmode=disable"),
            "no encryption".to_string(),
        ),
        (
            format!("{as_tls}?sslmode=verify-full&sslrootcert={ca}"),
            "the server's TLS certificate was refused (sslmode=verify-full)".into(),
        ),
        (
            format!("{by_name}?sslmode=verify-ca&sslrootcert={other_ca}"),
            "the server's TLS certificate was refused (sslmode=verify-ca)".into(),
        ),
        (
            format!("{as_tls}?sslmode=verify-ca"),
            "give sslrootcert=PATH".into(),
        ),
    ] {
        let out = add(&url, "refused");
        assert!(!out.status.success(), "{url}");
        assert!(stderr(&out).contains(&says), "{url}: {}", stderr(&out));
    }
    assert_eq!(
        number(
            &db.url(),
            "SELECT count(*) FROM agents WHERE name = 'refused'"
        ),
        0
    );
}

/// The serve (`pid@host`) holding each attached agent's stream.
fn holders(url: &str) -> BTreeMap<String, String> {
    rows(
        url,
        "SELECT name, attached_to FROM agents WHERE connected_since IS NOT NULL AND attached_to IS NOT NULL",
    )
    .into_iter()
    .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
    .collect()
}

/// Whether `replica` (`pid@host`) is the serve `serve`.
fn is(serve: &Serve, replica: &str) -> bool {
    replica.starts_with(&format!("{}@", serve.child.id()))
}

/// Two `gpufleet serve` on one PostgreSQL database, four dial-in agents given both serves' URLs,
/// two attached to each. A `standard` campaign on the cpu backend is handed to them, and the
/// serve that owns it is SIGKILLed mid-campaign. Its agents dial the other serve, which takes the
/// campaign over; the campaign finishes with exactly one result per job, and the killed serve,
/// started again, takes nothing twice.
#[test]
fn two_serves_on_one_database_lose_nothing_when_one_is_killed() {
    let Some(admin) = cluster() else { return };
    let test_db = TestDb::create(&admin, "replicas");
    let url = test_db.url();
    let db = Path::new(&url);
    let dir = tempfile::tempdir().unwrap();
    let names = ["p1", "p2", "p3", "p4"];
    let tokens: Vec<String> = names.iter().map(|n| enrol(db, n)).collect();
    let args = FLEET_SERVE;
    let mut serves = [Serve::with_args(db, &args), Serve::with_args(db, &args)];
    let mut agents = Vec::new();
    for (i, (name, token)) in names.iter().zip(&tokens).enumerate() {
        let (first, second) = if i < 2 { (0, 1) } else { (1, 0) };
        let mut cmd = dial_url(
            &format!("http://{}", serves[first].fleet),
            name,
            token,
            "",
            &dir.path().join(name),
        );
        cmd.args(["--connect", &format!("http://{}", serves[second].fleet)]);
        agents.push(cmd.spawn().unwrap());
    }
    wait_for("each agent attached to its first serve", 60, || {
        let h = holders(&url);
        h.len() == 4
            && names.iter().enumerate().all(|(i, n)| {
                h.get(*n)
                    .is_some_and(|r| is(&serves[usize::from(i >= 2)], r))
            })
    });

    // The standard suite's light kernels: every agent runs each on its cpu device.
    let mut run = Command::new(BIN);
    run.arg("--db").arg(&url).arg("run");
    for n in names {
        run.args(["--agent", n]);
    }
    for k in [
        "vec_add", "copy", "triad", "relu", "sigmoid", "tanh", "noop",
    ] {
        run.args(["--kernel", k]);
    }
    let run = run
        .args(["--backend", "cpu", "--suite", "standard"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the campaign owned and its first results", 120, || {
        number(&url, "SELECT count(*) FROM results") >= 4
    });
    let owner = rows(&url, "SELECT owner FROM campaigns WHERE id = 1")[0][0]
        .clone()
        .expect("the campaign has an owner");
    let victim = usize::from(!is(&serves[0], &owner));
    assert!(is(&serves[victim], &owner), "{owner}");
    let survivor = 1 - victim;
    let jobs_before = number(&url, "SELECT count(*) FROM jobs");
    let running = number(&url, "SELECT count(*) FROM jobs WHERE state <> 'done'");
    assert!(running > 0, "the kill comes mid-campaign");
    serves[victim].child.kill().unwrap(); // SIGKILL
    serves[victim].child.wait().unwrap();

    wait_for(
        "the killed serve's agents attached to the other",
        60,
        || {
            let h = holders(&url);
            h.len() == 4 && h.values().all(|r| is(&serves[survivor], r))
        },
    );
    let out = run.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let campaign = &rows(&url, "SELECT state, owner FROM campaigns WHERE id = 1")[0];
    assert_eq!(campaign[0].as_deref(), Some("done"), "{stderr}");
    assert!(is(&serves[survivor], campaign[1].as_deref().unwrap()));
    let jobs = number(&url, "SELECT count(*) FROM jobs WHERE campaign_id = 1");
    assert_eq!(jobs, jobs_before, "no job added");
    assert_eq!(jobs, 4 * 7, "7 kernels on each agent's cpu device");
    let check = |url: &str| {
        let results = rows(
            url,
            "SELECT run_id, job_id, status FROM results WHERE campaign_id = 1",
        );
        let run_ids: BTreeSet<_> = results.iter().map(|r| r[0].clone()).collect();
        let job_ids: BTreeSet<_> = results.iter().map(|r| r[1].clone()).collect();
        assert_eq!(
            results.len() as i64,
            jobs,
            "one result per job: {results:?}"
        );
        assert_eq!(run_ids.len() as i64, jobs, "distinct run ids = jobs");
        assert_eq!(job_ids.len() as i64, jobs, "every job has its result");
        let not_ok: Vec<_> = results
            .iter()
            .filter(|r| r[2].as_deref() != Some("ok"))
            .collect();
        assert!(not_ok.is_empty(), "{not_ok:?}");
        assert_eq!(
            number(url, "SELECT count(*) FROM jobs WHERE state <> 'done'"),
            0
        );
    };
    check(&url);

    // The killed serve, started again, finds nothing to take: no result, job or claim changes.
    let before = rows(
        &url,
        "SELECT id, run_id, state, attempts, claimed_by FROM jobs ORDER BY id",
    );
    serves[victim] = Serve::with_args(db, &args);
    std::thread::sleep(Duration::from_secs(5));
    check(&url);
    assert_eq!(
        rows(
            &url,
            "SELECT id, run_id, state, attempts, claimed_by FROM jobs ORDER BY id"
        ),
        before
    );
    assert_eq!(number(&url, "SELECT count(*) FROM campaigns"), 1);
    for mut a in agents {
        let _ = a.kill();
        let _ = a.wait();
    }
}

/// Two replicas' schedule daemons on one PostgreSQL database, their clocks injected, reach each of
/// 20 slots of an every-minute schedule at the same moment: each slot starts exactly one campaign,
/// whichever replica's tick gets there first, and every campaign runs to its end once.
#[test]
fn two_replicas_fire_each_of_20_slots_once() {
    let Some(admin) = cluster() else { return };
    let test_db = TestDb::create(&admin, "slots");
    let url = test_db.url();
    let db = Path::new(&url);
    let agent = Proc::agent(false);
    ok_stdout(&gpufleet(db, &["agents", "add", "rig", &agent.url]));
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("quick.toml");
    std::fs::write(
        &suite,
        "name = \"quick\"\n[defaults]\nwarmup = 0\nmin_iterations = 2\nmin_seconds = 0.01\n\
         timeout_s = 60\ntarget_ci_pct = 0\n[[run]]\nkernel = \"vec_add\"\nparams = { n = 4096 }\n",
    )
    .unwrap();
    let suite = suite.display().to_string();
    ok_stdout(&gpufleet(
        db,
        &[
            "schedule",
            "add",
            "every",
            "--cron",
            "* * * * *",
            "--suite",
            &suite,
            "--backend",
            "cpu",
            "--agent",
            "rig",
        ],
    ));
    let replica = || {
        Daemon::new(
            Db::open(db).unwrap(),
            DaemonConfig::default(),
            Arc::new(Quiet),
        )
    };
    let (a, b) = (replica(), replica());
    // Slots from 2030 on: the schedule counts everything before as handled.
    let base = 1_893_456_000.0;
    a.db().with(|s| s.pass_slot("every", base)).unwrap();
    let (mut by_a, mut by_b) = (0, 0);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let reports = runtime.block_on(async {
        for i in 1..=20 {
            let now = base + 60.0 * f64::from(i) + 1.0;
            let (x, y) = tokio::join!(a.tick(now), b.tick(now));
            let (x, y) = (x.unwrap(), y.unwrap());
            assert_eq!(x.len() + y.len(), 1, "slot {i}: a started {x:?}, b {y:?}");
            by_a += x.len();
            by_b += y.len();
            // A tick a moment later fires nothing again.
            let (x, y) = tokio::join!(a.tick(now + 2.0), b.tick(now + 2.0));
            assert!(x.unwrap().is_empty() && y.unwrap().is_empty(), "slot {i}");
        }
        [a.wait_idle().await, b.wait_idle().await].concat()
    });
    assert_eq!(reports.len(), 20, "a fired {by_a}, b {by_b}");
    for r in &reports {
        assert!(r.error.is_none(), "{r:?}");
    }
    assert_eq!(
        number(
            &url,
            "SELECT count(DISTINCT slot) FROM campaigns WHERE schedule_name = 'every' AND state = 'done'"
        ),
        20
    );
    assert_eq!(number(&url, "SELECT count(*) FROM campaigns"), 20);
    // One result per slot's job, and one per confirmation rerun the regression check asked for.
    assert_eq!(
        number(
            &url,
            "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job_id
             WHERE j.confirms_result_id IS NULL"
        ),
        20
    );
    assert_eq!(
        number(&url, "SELECT count(DISTINCT job_id) FROM results"),
        number(&url, "SELECT count(*) FROM jobs")
    );
    assert_eq!(
        number(&url, "SELECT count(*) FROM results"),
        number(&url, "SELECT count(*) FROM jobs")
    );
}
