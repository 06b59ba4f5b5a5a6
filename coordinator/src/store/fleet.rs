//! Agents that dial in: enrolment (only a SHA-256 of the token is kept), the check of an agent's
//! credentials when it attaches, and the connection state a serve records so that other processes
//! (`agents list`, `gpufleet run`) can see it.

use super::engine::{OptionalExtension, params};

use super::agents::{AGENT_COLUMNS, MAX_AGENT_NAME, agent_from_row, agent_named, check_agent_name};
use super::error::{StoreError, sql};
use super::open::Store;
use super::rows::{AgentKind, AgentRow};
use super::values::parse_json;

/// Lowercase hex SHA-256 of a token: what the store keeps instead of the token. Enrolment tokens
/// are 256 random bits, so an unsalted hash cannot be reversed by guessing.
pub fn token_hash(token: &str) -> String {
    gpufleet_proto::digest::sha256_hex(token.as_bytes())
}

/// Why an attaching agent was turned away. The text is safe to send back to the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttachRefusal {
    #[error(
        "no dial-in agent named {0} is enrolled (enrol it with `gpufleet agents add {0} --dial-in`)"
    )]
    NotEnrolled(String),
    #[error("agent {0} is registered as a direct agent; the coordinator dials it")]
    Direct(String),
    #[error("wrong token for agent {0}")]
    WrongToken(String),
}

impl Store {
    /// Enrols a dial-in agent `name` whose token hashes to `token_hash`, or revives a removed agent
    /// of that name as a dial-in agent (its history continues).
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for a bad name (`field: "name"`) or a hash that is not 64 hex
    /// characters; [`StoreError::AgentExists`] if an active agent has the name.
    pub fn enrol_agent(&mut self, name: &str, token_hash: &str) -> Result<AgentRow, StoreError> {
        check_agent_name(name)?;
        if token_hash.len() != 64 || !token_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::invalid(
                "token_hash",
                "must be 64 hex characters",
            ));
        }
        let now = self.now();
        let context = "enrolling an agent";
        let tx = self.write_tx().map_err(sql(context))?;
        let active: Option<bool> = tx
            .query_row(
                "SELECT removed_at IS NULL FROM agents WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql(context))?;
        if active == Some(true) {
            return Err(StoreError::AgentExists {
                name: name.to_owned(),
            });
        }
        tx.execute(
            "INSERT INTO agents (name, url, token, added_at, kind, token_hash)
             VALUES (?1, '', NULL, ?2, 'dial-in', ?3)
             ON CONFLICT (name) DO UPDATE SET
                url = '', token = NULL, added_at = excluded.added_at, removed_at = NULL,
                kind = 'dial-in', token_hash = excluded.token_hash, connected_since = NULL,
                remote_addr = NULL, agent_version = NULL, info_json = NULL",
            params![name, now, token_hash],
        )
        .map_err(sql(context))?;
        let row = agent_named(&tx, name).map_err(sql(context))?;
        tx.commit().map_err(sql(context))?;
        Ok(row)
    }

    /// Checks an attaching agent's name and token against its enrolment.
    ///
    /// # Errors
    /// `Ok(Err(refusal))` when the agent is unknown, removed, direct or brings the wrong token;
    /// [`StoreError`] when the store cannot be read.
    pub fn check_attach(
        &self,
        name: &str,
        token: &str,
    ) -> Result<Result<AgentRow, AttachRefusal>, StoreError> {
        let shown = gpufleet_kernels::prefix(name, MAX_AGENT_NAME).to_string();
        let found: Option<(AgentRow, Option<String>)> = self
            .conn
            .query_row(
                &format!(
                    "SELECT {AGENT_COLUMNS}, token_hash FROM agents
                     WHERE name = ?1 AND removed_at IS NULL"
                ),
                [name],
                |r| Ok((agent_from_row(r)?, r.get("token_hash")?)),
            )
            .optional()
            .map_err(sql("checking an attaching agent"))?;
        let Some((row, hash)) = found else {
            return Ok(Err(AttachRefusal::NotEnrolled(shown)));
        };
        if row.kind != AgentKind::DialIn {
            return Ok(Err(AttachRefusal::Direct(shown)));
        }
        let same = gpufleet_kernels::secrets_equal(&hash.unwrap_or_default(), &token_hash(token));
        if !same {
            return Ok(Err(AttachRefusal::WrongToken(shown)));
        }
        Ok(Ok(row))
    }

    /// Records that serve `replica` (`pid@host`) now holds agent `agent_id`'s stream, with what
    /// its Hello said.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] when `info_json` is not JSON; [`StoreError::Db`].
    pub fn agent_attached(
        &mut self,
        agent_id: i64,
        replica: &str,
        remote_addr: &str,
        agent_version: &str,
        info_json: &str,
        api_url: Option<&str>,
    ) -> Result<(), StoreError> {
        parse_json("info_json", info_json)?;
        let now = self.now();
        self.conn
            .execute(
                "UPDATE agents SET connected_since = ?2, last_seen = ?2, remote_addr = ?3,
                    agent_version = ?4, info_json = ?5, api_url = ?6, attached_to = ?7
                 WHERE id = ?1",
                params![
                    agent_id,
                    now,
                    remote_addr,
                    agent_version,
                    info_json,
                    api_url,
                    replica
                ],
            )
            .map_err(sql("recording an attached agent"))?;
        Ok(())
    }

    /// Refreshes `last_seen` of the agents whose streams this serve holds.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub fn agents_seen(&mut self, agent_ids: &[i64]) -> Result<(), StoreError> {
        let now = self.now();
        let context = "refreshing attached agents";
        let tx = self.conn.begin().map_err(sql(context))?;
        for id in agent_ids {
            tx.execute(
                "UPDATE agents SET last_seen = ?2 WHERE id = ?1",
                params![id, now],
            )
            .map_err(sql(context))?;
        }
        tx.commit().map_err(sql(context))
    }

    /// Records that agent `agent_id`'s stream to serve `replica` ended. Nothing changes when the
    /// agent has attached to another serve since (that serve holds it now).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub fn agent_detached(&mut self, agent_id: i64, replica: &str) -> Result<(), StoreError> {
        let now = self.now();
        self.conn
            .execute(
                "UPDATE agents SET connected_since = NULL, last_seen = ?2, api_url = NULL,
                    attached_to = NULL
                 WHERE id = ?1 AND (attached_to IS NULL OR attached_to = ?3)",
                params![agent_id, now, replica],
            )
            .map_err(sql("recording a detached agent"))?;
        Ok(())
    }

    /// Sets how an https direct agent is verified: its certificate's SHA-256 or a CA (PEM).
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub fn set_agent_tls(
        &mut self,
        agent_id: i64,
        pin: Option<&str>,
        ca_pem: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE agents SET tls_pin = ?2, tls_ca = ?3 WHERE id = ?1",
                params![agent_id, pin, ca_pem],
            )
            .map_err(sql("storing an agent's TLS trust"))?;
        Ok(())
    }

    /// Stores what `agent_id` last said about itself (its AgentInfo as JSON): the fleet page
    /// shows it, and a process other than the serve can plan with it.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] when `info_json` is not JSON; [`StoreError::Db`].
    pub fn set_agent_info(&mut self, agent_id: i64, info_json: &str) -> Result<(), StoreError> {
        parse_json("info_json", info_json)?;
        self.conn
            .execute(
                "UPDATE agents SET info_json = ?2 WHERE id = ?1",
                params![agent_id, info_json],
            )
            .map_err(sql("storing an agent's description"))?;
        Ok(())
    }

    /// The newest campaign with a job on each agent: agent id to campaign id.
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails.
    pub fn latest_campaign_per_agent(
        &self,
    ) -> Result<std::collections::HashMap<i64, i64>, StoreError> {
        let context = "finding each agent's latest campaign";
        let mut stmt = self
            .conn
            // One seek per agent on `jobs_by_agent` (agent_id, campaign_id), never a pass over jobs.
            .prepare_cached(
                "SELECT id, latest FROM (
                     SELECT id, (SELECT max(campaign_id) FROM jobs WHERE agent_id = agents.id)
                            AS latest
                       FROM agents) AS per_agent
                 WHERE latest IS NOT NULL",
            )
            .map_err(sql(context))?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// The AgentInfo (as JSON) a dial-in agent last sent in its Hello, if any.
    ///
    /// # Errors
    /// [`StoreError::Db`].
    pub fn agent_info(&self, agent_id: i64) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row(
                "SELECT info_json FROM agents WHERE id = ?1",
                [agent_id],
                |r| r.get(0),
            )
            .optional()
            .map(Option::flatten)
            .map_err(sql("reading an agent's description"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::temp_store;
    use super::*;

    #[test]
    fn each_agent_maps_to_the_newest_campaign_it_has_a_job_in() {
        let (_db, mut store) = temp_store();
        let a = store.add_agent("a", "http://h:1", None).unwrap().id;
        let b = store.add_agent("b", "http://h:2", None).unwrap().id;
        store.add_agent("idle", "http://h:3", None).unwrap();
        let first = store.create_campaign("smoke", "", "{}").unwrap();
        let second = store.create_campaign("smoke", "", "{}").unwrap();
        for (i, (campaign, agent)) in [(first, a), (second, a), (first, b)]
            .into_iter()
            .enumerate()
        {
            store
                .add_job(&super::super::NewJob {
                    campaign_id: campaign,
                    agent_id: agent,
                    device_row_id: None,
                    spec_key: "k".into(),
                    spec_json: "{}".into(),
                    run_id: format!("run-{i}"),
                })
                .unwrap();
        }
        let latest = store.latest_campaign_per_agent().unwrap();
        assert_eq!(
            latest.len(),
            2,
            "an agent without jobs is left out: {latest:?}"
        );
        assert_eq!(latest[&a], second);
        assert_eq!(latest[&b], first);
    }

    #[test]
    fn enrolment_keeps_only_the_hash_and_checks_the_token() {
        let (_dir, mut store) = temp_store();
        let token = "0123456789abcdef0123456789abcdef";
        let row = store.enrol_agent("pod1", &token_hash(token)).unwrap();
        assert_eq!(row.kind, AgentKind::DialIn);
        assert_eq!(row.url, "");
        assert_eq!(row.token, None);
        let stored: String = store
            .conn
            .query_row(
                "SELECT token_hash FROM agents WHERE name = 'pod1'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_ne!(stored, token);
        assert_eq!(stored.len(), 64);
        assert!(store.check_attach("pod1", token).unwrap().is_ok());
        assert_eq!(
            store.check_attach("pod1", "wrong").unwrap(),
            Err(AttachRefusal::WrongToken("pod1".into()))
        );
        assert_eq!(
            store.check_attach("pod2", token).unwrap(),
            Err(AttachRefusal::NotEnrolled("pod2".into()))
        );
        // A second enrolment of an active name is refused; a removed agent is refused at attach
        // and can be enrolled again with a new token.
        assert!(matches!(
            store.enrol_agent("pod1", &token_hash("x")),
            Err(StoreError::AgentExists { .. })
        ));
        store.remove_agent("pod1").unwrap();
        assert_eq!(
            store.check_attach("pod1", token).unwrap(),
            Err(AttachRefusal::NotEnrolled("pod1".into()))
        );
        let again = store.enrol_agent("pod1", &token_hash("new")).unwrap();
        assert_eq!(again.id, row.id);
        assert!(store.check_attach("pod1", token).unwrap().is_err());
        assert!(store.check_attach("pod1", "new").unwrap().is_ok());
    }

    #[test]
    fn a_direct_agent_cannot_attach_and_connection_state_is_recorded() {
        let (_dir, mut store) = temp_store();
        store
            .add_agent("rig", "http://127.0.0.1:50051", None)
            .unwrap();
        assert_eq!(
            store.check_attach("rig", "anything").unwrap(),
            Err(AttachRefusal::Direct("rig".into()))
        );
        let pod = store.enrol_agent("pod", &token_hash("t")).unwrap();
        assert!(matches!(
            store.agent_attached(pod.id, "1@a", "10.0.0.2:4000", "0.1.0", "{oops", None),
            Err(StoreError::InvalidInput {
                field: "info_json",
                ..
            })
        ));
        store
            .agent_attached(
                pod.id,
                "1@a",
                "10.0.0.2:4000",
                "0.1.0",
                r#"{"name":"pod"}"#,
                Some("http://127.0.0.1:8787"),
            )
            .unwrap();
        let row = store.agent("pod").unwrap().unwrap();
        assert!(row.connected_since.is_some());
        assert_eq!(row.remote_addr.as_deref(), Some("10.0.0.2:4000"));
        assert_eq!(row.agent_version.as_deref(), Some("0.1.0"));
        assert_eq!(row.api_url.as_deref(), Some("http://127.0.0.1:8787"));
        assert_eq!(row.attached_to.as_deref(), Some("1@a"));
        assert_eq!(
            store.agent_info(pod.id).unwrap().as_deref(),
            Some(r#"{"name":"pod"}"#)
        );
        // A serve the agent left late does not detach it from the serve holding it now.
        store
            .agent_attached(pod.id, "2@b", "10.0.0.2:4001", "0.1.0", "{}", None)
            .unwrap();
        store.agent_detached(pod.id, "1@a").unwrap();
        let row = store.agent("pod").unwrap().unwrap();
        assert_eq!(row.attached_to.as_deref(), Some("2@b"));
        assert!(row.connected_since.is_some());
        store.agent_detached(pod.id, "2@b").unwrap();
        let row = store.agent("pod").unwrap().unwrap();
        assert_eq!(
            (
                row.connected_since,
                row.api_url.as_deref(),
                row.attached_to.as_deref()
            ),
            (None, None, None)
        );
        assert!(row.last_seen.is_some());
        // The token hash never appears in the row's JSON.
        let json = serde_json::to_string(&row).unwrap();
        assert!(!json.contains(&token_hash("t")), "{json}");
        assert!(json.contains("\"kind\":\"dial-in\""), "{json}");
    }
}
