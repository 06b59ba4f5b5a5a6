//! Agents and their devices.
//!
//! Agents are soft-removed (`removed_at`) so their results keep a name to show; see the module docs
//! of `store` for why.

use super::engine::{Conn, DbResult, OptionalExtension, Row, named_params, params};

use super::error::StoreError;
use super::error::sql;
use super::open::Store;
use super::rows::{AgentKind, AgentRow, DeviceRecord, DeviceRow};
use super::values::{json_column, parse_json, require_non_empty};

/// Longest accepted agent name.
pub const MAX_AGENT_NAME: usize = 64;
/// Longest accepted agent URL.
pub const MAX_AGENT_URL: usize = 2048;

pub(super) const AGENT_COLUMNS: &str = "id, name, kind, url, token, added_at, connected_since, last_seen, remote_addr, agent_version, \
     tls_pin, tls_ca, api_url, attached_to";

impl Store {
    /// Adds an agent, or revives a removed agent of the same name (keeping its row, so its history
    /// continues) with the new URL and token.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for a name outside `[A-Za-z0-9_.-]{1,64}` (`field: "name"`) or a
    /// URL that is not `http://` / `https://` (`field: "url"`); [`StoreError::AgentExists`] if an
    /// active agent has the name.
    pub fn add_agent(
        &mut self,
        name: &str,
        url: &str,
        token: Option<&str>,
    ) -> Result<AgentRow, StoreError> {
        validate_agent(name, url, token)?;
        let now = self.now();
        let context = "adding an agent";
        let tx = self.write_tx().map_err(sql(context))?;
        let existing: Option<Option<f64>> = tx
            .query_row(
                "SELECT removed_at FROM agents WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql(context))?;
        match existing {
            Some(None) => {
                return Err(StoreError::AgentExists {
                    name: name.to_owned(),
                });
            }
            Some(Some(_removed)) => {
                tx.execute(
                    "UPDATE agents SET url = ?2, token = ?3, added_at = ?4, removed_at = NULL,
                        kind = 'direct', token_hash = NULL, connected_since = NULL
                     WHERE name = ?1",
                    params![name, url, token, now],
                )
                .map_err(sql(context))?;
            }
            None => {
                tx.execute(
                    "INSERT INTO agents (name, url, token, added_at) VALUES (?1, ?2, ?3, ?4)",
                    params![name, url, token, now],
                )
                .map_err(|e| {
                    if e.is_unique_violation() {
                        StoreError::AgentExists {
                            name: name.to_owned(),
                        }
                    } else {
                        sql(context)(e)
                    }
                })?;
            }
        }
        let row = agent_named(&tx, name).map_err(sql(context))?;
        tx.commit().map_err(sql(context))?;
        Ok(row)
    }

    /// Adds the agent or, if the name exists (active or removed), sets its URL and token and makes it
    /// active; for agents the coordinator manages itself (the demo's local agent).
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] as for [`Store::add_agent`].
    pub fn upsert_agent(
        &mut self,
        name: &str,
        url: &str,
        token: Option<&str>,
    ) -> Result<AgentRow, StoreError> {
        validate_agent(name, url, token)?;
        let now = self.now();
        self.conn
            .query_row(
                &format!(
                    "INSERT INTO agents (name, url, token, added_at) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (name) DO UPDATE SET
                        url = excluded.url,
                        token = excluded.token,
                        kind = 'direct',
                        token_hash = NULL,
                        added_at = CASE WHEN agents.removed_at IS NULL THEN agents.added_at
                                        ELSE excluded.added_at END,
                        removed_at = NULL
                     RETURNING {AGENT_COLUMNS}"
                ),
                params![name, url, token, now],
                agent_from_row,
            )
            .map_err(sql("upserting an agent"))
    }

    /// Removes the agent from listings; its devices, jobs and results stay. Returns whether an
    /// active agent of that name existed.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the update fails.
    pub fn remove_agent(&mut self, name: &str) -> Result<bool, StoreError> {
        let now = self.now();
        let changed = self
            .conn
            .execute(
                "UPDATE agents SET removed_at = ?2 WHERE name = ?1 AND removed_at IS NULL",
                params![name, now],
            )
            .map_err(sql("removing an agent"))?;
        Ok(changed > 0)
    }

    /// Active agents, by name.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn agents(&self) -> Result<Vec<AgentRow>, StoreError> {
        let context = "listing agents";
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {AGENT_COLUMNS} FROM agents WHERE removed_at IS NULL ORDER BY name"
            ))
            .map_err(sql(context))?;
        stmt.query_map([], agent_from_row)
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// The active agent called `name`, if any.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn agent(&self, name: &str) -> Result<Option<AgentRow>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {AGENT_COLUMNS} FROM agents WHERE name = ?1 AND removed_at IS NULL"
                ),
                [name],
                agent_from_row,
            )
            .optional()
            .map_err(sql("looking up an agent"))
    }

    /// Records a device an agent reported: inserts it, or refreshes its description and `last_seen`.
    /// Returns the device row id (stable across refreshes).
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for an empty `device_id` or `backend`, or `info_json` that is not
    /// JSON; [`StoreError::UnknownAgent`] (named `#<id>`) if no agent has `agent_id`.
    pub fn upsert_device(&mut self, agent_id: i64, d: &DeviceRecord) -> Result<i64, StoreError> {
        require_non_empty("device_id", &d.device_id)?;
        require_non_empty("backend", &d.backend)?;
        parse_json("info_json", &d.info_json)?;
        let now = self.now();
        let context = "storing a device";
        let tx = self.write_tx().map_err(sql(context))?;
        let agent_exists = tx
            .query_row("SELECT 1 FROM agents WHERE id = ?1", [agent_id], |_| Ok(()))
            .optional()
            .map_err(sql(context))?
            .is_some();
        if !agent_exists {
            return Err(StoreError::UnknownAgent {
                name: format!("#{agent_id}"),
            });
        }
        let id = tx
            .query_row(
                "INSERT INTO devices (agent_id, device_id, backend, vendor, name, arch, pci_bus_id,
                                      info_json, first_seen, last_seen)
                 VALUES (:agent_id, :device_id, :backend, :vendor, :name, :arch, :pci_bus_id,
                         :info_json, :now, :now)
                 ON CONFLICT (agent_id, device_id) DO UPDATE SET
                    backend = excluded.backend,
                    vendor = excluded.vendor,
                    name = excluded.name,
                    arch = excluded.arch,
                    pci_bus_id = excluded.pci_bus_id,
                    info_json = excluded.info_json,
                    last_seen = excluded.last_seen
                 RETURNING id",
                named_params! {
                    ":agent_id": agent_id,
                    ":device_id": d.device_id,
                    ":backend": d.backend,
                    ":vendor": d.vendor,
                    ":name": d.name,
                    ":arch": d.arch,
                    ":pci_bus_id": d.pci_bus_id,
                    ":info_json": d.info_json,
                    ":now": now,
                },
                |r| r.get(0),
            )
            .map_err(sql(context))?;
        tx.commit().map_err(sql(context))?;
        Ok(id)
    }

    /// Devices of active agents, by agent name then device id.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails or a stored `info_json` is not JSON.
    pub fn devices(&self) -> Result<Vec<DeviceRow>, StoreError> {
        let context = "listing devices";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT d.id, d.agent_id, a.name AS agent, d.device_id, d.backend, d.vendor,
                        d.name, d.arch, d.pci_bus_id, d.info_json, d.first_seen, d.last_seen
                 FROM devices d JOIN agents a ON a.id = d.agent_id
                 WHERE a.removed_at IS NULL
                 ORDER BY a.name, d.device_id",
            )
            .map_err(sql(context))?;
        stmt.query_map([], |r| {
            Ok(DeviceRow {
                id: r.get("id")?,
                agent_id: r.get("agent_id")?,
                agent: r.get("agent")?,
                device_id: r.get("device_id")?,
                backend: r.get("backend")?,
                vendor: r.get("vendor")?,
                name: r.get("name")?,
                arch: r.get("arch")?,
                pci_bus_id: r.get("pci_bus_id")?,
                info: json_column(r, "info_json")?,
                first_seen: r.get("first_seen")?,
                last_seen: r.get("last_seen")?,
            })
        })
        .map_err(sql(context))?
        .collect::<Result<_, _>>()
        .map_err(sql(context))
    }
}

/// The row of agent `name` (active or removed), inside a transaction that just wrote it.
pub(super) fn agent_named(conn: &Conn, name: &str) -> DbResult<AgentRow> {
    conn.query_row(
        &format!("SELECT {AGENT_COLUMNS} FROM agents WHERE name = ?1"),
        [name],
        agent_from_row,
    )
}

pub(super) fn agent_from_row(r: &Row<'_>) -> DbResult<AgentRow> {
    let kind: String = r.get("kind")?;
    Ok(AgentRow {
        id: r.get("id")?,
        name: r.get("name")?,
        kind: if kind == "dial-in" {
            AgentKind::DialIn
        } else {
            AgentKind::Direct
        },
        url: r.get("url")?,
        token: r.get("token")?,
        added_at: r.get("added_at")?,
        connected_since: r.get("connected_since")?,
        last_seen: r.get("last_seen")?,
        remote_addr: r.get("remote_addr")?,
        agent_version: r.get("agent_version")?,
        tls_pin: r.get("tls_pin")?,
        tls_ca: r.get("tls_ca")?,
        api_url: r.get("api_url")?,
        attached_to: r.get("attached_to")?,
    })
}

/// Checks an agent's name and URL before anything is written.
/// The rule for names the user picks (agents, schedules): 1 to [`MAX_AGENT_NAME`] characters of
/// `[A-Za-z0-9_.-]`.
pub(super) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_AGENT_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// An agent's name, checked before anything is written (`field: "name"`, the input quoted short).
pub(super) fn check_agent_name(name: &str) -> Result<(), StoreError> {
    if is_valid_name(name) {
        return Ok(());
    }
    Err(StoreError::invalid(
        "name",
        format!(
            "agent name {} must be 1 to {MAX_AGENT_NAME} characters of A-Z a-z 0-9 _ . -",
            gpufleet_kernels::quote(name)
        ),
    ))
}

fn validate_agent(name: &str, url: &str, token: Option<&str>) -> Result<(), StoreError> {
    check_agent_name(name)?;
    validate_url(url)?;
    if let Some(token) = token {
        validate_token(token)?;
    }
    Ok(())
}

/// An agent URL: `http://` or `https://`, a host, a port in 1..=65535 when given, nothing after
/// the authority but an optional `/`; checked when it is stored so a typo fails at `agents add`,
/// not at the first run.
fn validate_url(url: &str) -> Result<(), StoreError> {
    let invalid = |why: String| StoreError::invalid("url", why);
    let shown = gpufleet_kernels::quote(url);
    if url.len() > MAX_AGENT_URL {
        return Err(invalid(format!(
            "agent url is {} bytes, longer than the maximum {MAX_AGENT_URL}",
            url.len()
        )));
    }
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(invalid(format!(
            "agent url {shown} must start with http:// or https://"
        )));
    };
    if rest.is_empty() {
        return Err(invalid(format!(
            "agent url {shown} has no host after the scheme"
        )));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(format!("agent url {shown} contains whitespace")));
    }
    let uri: tonic::transport::Uri = url
        .parse()
        .map_err(|e| invalid(format!("agent url {shown} is not a valid URL: {e}")))?;
    let Some(authority) = uri.authority() else {
        return Err(invalid(format!("agent url {shown} has no host")));
    };
    if authority.host().is_empty() || authority.as_str().contains('@') {
        return Err(invalid(format!(
            "agent url {shown} must be scheme://host[:port] (no user or password: use --token)"
        )));
    }
    // The port as written (the URI parser drops one that does not fit a u16).
    let after_host = authority
        .as_str()
        .rsplit_once(']')
        .map_or(authority.as_str(), |(_, rest)| rest);
    if let Some((_, port)) = after_host.rsplit_once(':')
        && !matches!(port.parse::<u32>(), Ok(1..=65535))
    {
        return Err(invalid(format!(
            "agent url {shown}: port {} is outside 1..=65535",
            gpufleet_kernels::quote(port)
        )));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(invalid(format!(
            "agent url {shown} must be scheme://host[:port] without a path or query"
        )));
    }
    Ok(())
}

/// Longest bearer token stored.
const MAX_TOKEN_BYTES: usize = 4096;

/// A bearer token travels in an `authorization` header: printable ASCII without whitespace.
/// The message never quotes the token.
fn validate_token(token: &str) -> Result<(), StoreError> {
    if token.is_empty()
        || token.len() > MAX_TOKEN_BYTES
        || !token.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(StoreError::invalid(
            "token",
            format!(
                "the token must be 1 to {MAX_TOKEN_BYTES} printable ASCII characters without whitespace (it is sent in an HTTP header)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_invalid, temp_store};
    use super::*;

    fn cpu_device(info: &str) -> DeviceRecord {
        DeviceRecord {
            device_id: "cpu:0".into(),
            backend: "cpu".into(),
            vendor: "AMD".into(),
            name: "Ryzen 5 8600G".into(),
            arch: "x86_64".into(),
            pci_bus_id: String::new(),
            info_json: info.into(),
        }
    }

    #[test]
    fn add_list_and_look_up_agents() {
        let (_dir, store) = temp_store();
        let mut store = store.with_clock(|| 100.0);
        let b = store
            .add_agent("mi300x", "https://pod:50051", Some("tok"))
            .unwrap();
        let a = store
            .add_agent("gfx803", "http://10.0.0.2:50051", None)
            .unwrap();
        assert_eq!(b.token.as_deref(), Some("tok"));
        assert_eq!(a.added_at, 100.0);
        let names: Vec<String> = store
            .agents()
            .unwrap()
            .into_iter()
            .map(|a| a.name)
            .collect();
        assert_eq!(names, ["gfx803", "mi300x"]);
        assert_eq!(store.agent("mi300x").unwrap(), Some(b));
        assert_eq!(store.agent("nope").unwrap(), None);
    }

    #[test]
    fn duplicate_name_is_refused() {
        let (_dir, mut store) = temp_store();
        store.add_agent("a", "http://h:1", None).unwrap();
        let err = store.add_agent("a", "http://other:2", None).unwrap_err();
        assert!(
            matches!(&err, StoreError::AgentExists { name } if name == "a"),
            "{err}"
        );
        assert_eq!(store.agent("a").unwrap().unwrap().url, "http://h:1");
    }

    #[test]
    fn names_and_urls_are_validated() {
        let (_dir, mut store) = temp_store();
        let long = "x".repeat(MAX_AGENT_NAME + 1);
        for bad in ["", "has space", "slash/y", "ünï", long.as_str()] {
            let err = store.add_agent(bad, "http://h:1", None).unwrap_err();
            assert!(
                matches!(err, StoreError::InvalidInput { field: "name", .. }),
                "{bad:?}: {err}"
            );
        }
        let ok = "x".repeat(MAX_AGENT_NAME);
        store.add_agent(&ok, "http://h:1", None).unwrap();
        store.add_agent("a.b_c-9", "https://h", None).unwrap();
        let bad_urls = [
            "h:1",
            "ftp://h",
            "http://",
            "https://a b",
            "HTTP//x",
            "http://[::1:50051",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:0",
            "http://user:pw@h:1",
            "http://h:1/path",
        ];
        for bad in bad_urls {
            let err = store.add_agent("u", bad, None).unwrap_err();
            assert!(
                matches!(err, StoreError::InvalidInput { field: "url", .. }),
                "{bad:?}: {err}"
            );
            let err = store.upsert_agent("u", bad, None).unwrap_err();
            assert_invalid(&err, "url");
        }
        store.add_agent("v6", "http://[::1]:50051", None).unwrap();
        store.add_agent("slash", "http://h:2/", None).unwrap();
        let err = store.add_agent("p", "http://h:99999", None).unwrap_err();
        assert!(err.to_string().contains("1..=65535"), "{err}");
        for bad in ["has space", "", "tab\there", "ünï"] {
            let err = store.add_agent("t", "http://h:1", Some(bad)).unwrap_err();
            assert_invalid(&err, "token");
            assert!(!err.to_string().contains("url"), "{err}");
        }
        let err = store.add_agent("bad name", "x", None).unwrap_err();
        assert!(err.to_string().contains("1 to 64"), "{err}");
        assert_eq!(
            store.agents().unwrap().len(),
            4,
            "nothing invalid was stored"
        );
    }

    #[test]
    fn remove_hides_and_re_add_revives_the_same_row() {
        let (_dir, store) = temp_store();
        let mut store = store.with_clock(|| 5.0);
        let first = store
            .add_agent("rx5600", "http://a:1", Some("old"))
            .unwrap();
        assert!(store.remove_agent("rx5600").unwrap());
        assert!(!store.remove_agent("rx5600").unwrap(), "already removed");
        assert!(!store.remove_agent("never-was").unwrap());
        assert!(store.agents().unwrap().is_empty());
        assert_eq!(store.agent("rx5600").unwrap(), None);

        let again = store.add_agent("rx5600", "http://b:2", None).unwrap();
        assert_eq!(again.id, first.id, "history continues on the same row");
        assert_eq!(again.url, "http://b:2");
        assert_eq!(again.token, None);
        assert_eq!(store.agents().unwrap(), [again]);
    }

    #[test]
    fn upsert_agent_inserts_updates_and_revives() {
        let (_dir, mut store) = temp_store();
        let a = store
            .upsert_agent("local", "http://127.0.0.1:1", None)
            .unwrap();
        let b = store
            .upsert_agent("local", "http://127.0.0.1:2", Some("t"))
            .unwrap();
        assert_eq!(a.id, b.id);
        assert_eq!(b.url, "http://127.0.0.1:2");
        assert_eq!(b.token.as_deref(), Some("t"));
        store.remove_agent("local").unwrap();
        let c = store
            .upsert_agent("local", "http://127.0.0.1:3", None)
            .unwrap();
        assert_eq!(c.id, a.id);
        assert_eq!(store.agents().unwrap(), [c]);
    }

    #[test]
    fn upsert_device_keeps_the_row_and_refreshes_it() {
        let (_dir, store) = temp_store();
        let t = std::sync::Arc::new(std::sync::Mutex::new(10.0));
        let clock = t.clone();
        let mut store = store.with_clock(move || *clock.lock().unwrap());
        let agent = store.add_agent("apu", "http://h:1", None).unwrap();
        let id = store
            .upsert_device(agent.id, &cpu_device(r#"{"cores":6}"#))
            .unwrap();
        *t.lock().unwrap() = 20.0;
        let again = store
            .upsert_device(agent.id, &cpu_device(r#"{"cores":12}"#))
            .unwrap();
        assert_eq!(id, again);
        let devices = store.devices().unwrap();
        assert_eq!(devices.len(), 1);
        let d = &devices[0];
        assert_eq!((d.first_seen, d.last_seen), (10.0, 20.0));
        assert_eq!(d.info, serde_json::json!({"cores": 12}));
        assert_eq!(d.agent, "apu");
    }

    #[test]
    fn upsert_device_rejects_bad_input_and_unknown_agents() {
        let (_dir, mut store) = temp_store();
        let agent = store.add_agent("apu", "http://h:1", None).unwrap();
        let err = store
            .upsert_device(agent.id, &cpu_device("{not json"))
            .unwrap_err();
        assert_invalid(&err, "info_json");
        let mut blank = cpu_device("{}");
        blank.device_id = " ".into();
        let err = store.upsert_device(agent.id, &blank).unwrap_err();
        assert_invalid(&err, "device_id");
        let err = store
            .upsert_device(agent.id + 100, &cpu_device("{}"))
            .unwrap_err();
        assert!(matches!(err, StoreError::UnknownAgent { .. }), "{err}");
        assert!(store.devices().unwrap().is_empty());
    }
}
