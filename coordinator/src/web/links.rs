//! What a page covers ([`Scope`]), how pages link to each other, and the queries a link carries: absolute server paths on the
//! serve, relative file names in a static report (which records what it linked to, so the report
//! writes those pages too).

use crate::store::ResultRow;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Which stored work a page covers: everything (serve), or one campaign or a time window (report).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    pub campaign: Option<i64>,
    /// Unix seconds.
    pub since: Option<f64>,
}

impl Scope {
    pub(crate) fn has_result(&self, r: &ResultRow) -> bool {
        self.campaign
            .is_none_or(|c| r.record.campaign_id == Some(c))
            && self
                .since
                .is_none_or(|t| r.record.created_at.unwrap_or(0.0) >= t)
    }
}

/// Filters of the compare page (all optional; in the URL, so a view is a link).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompareQuery {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub suite: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kernel: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub dtype: String,
    /// The environment set of an env-matrix campaign (`@name` of the spec key); `-` for none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub env: String,
    /// The column relative figures are against (`agent:device_id`); empty: the best of each row.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub baseline: String,
    /// Which page of spec rows the page shows (from 1); the downloads give every row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<usize>,
    /// Which page of device columns the page shows (from 1); the downloads give every column.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cols: Option<usize>,
}

/// One series: a spec on one device of one agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryQuery {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub spec: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub device: String,
    /// `log` for a log10 y axis.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scale: String,
}

impl HistoryQuery {
    /// A file name for a report: 16 hex digits of the series' SHA-256.
    pub fn file_key(&self) -> String {
        let text = format!("{}\n{}\n{}", self.spec, self.agent, self.device);
        gpufleet_proto::digest::sha256_hex(text.as_bytes())[..16].to_string()
    }
}

/// A page a static report must also write because another page links to it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ref {
    Run(i64),
    History(HistoryQuery),
    Campaign(i64),
    /// A device page: agent name, device id.
    Device(String, String),
}

/// A device page's file name in a report: 16 hex digits of the SHA-256 of agent and device.
pub fn device_file_key(agent: &str, device: &str) -> String {
    gpufleet_proto::digest::sha256_hex(format!("{agent}\n{device}").as_bytes())[..16].to_string()
}

/// A path segment with every byte outside the unreserved set (and `:`) percent-encoded.
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// How pages link to each other: server paths, or relative files of a static report (which records
/// what it linked to, so the report writes those pages too).
#[derive(Debug, Clone, Default)]
pub struct Links {
    /// `None`: server paths. `Some`: a static report, this page `depth` folders below its root.
    report: Option<(usize, Arc<Mutex<BTreeSet<Ref>>>)>,
    /// Static: the campaigns that get a page (others are named without a link).
    campaigns: Option<BTreeSet<i64>>,
}

/// `?a=1&b=2` of a query struct (empty fields are left out; they skip serialising), or nothing.
fn query_string<T: Serialize>(q: &T) -> String {
    match serde_urlencoded::to_string(q) {
        Ok(text) if !text.is_empty() => format!("?{text}"),
        _ => String::new(),
    }
}

impl Links {
    /// Links of a static report rooted at its folder, for the campaigns in `campaigns`.
    pub fn report(campaigns: BTreeSet<i64>) -> Links {
        Links {
            report: Some((0, Arc::new(Mutex::new(BTreeSet::new())))),
            campaigns: Some(campaigns),
        }
    }

    /// The same links for a page `depth` folders below the report's root.
    pub fn at_depth(&self, depth: usize) -> Links {
        let mut l = self.clone();
        if let Some((d, _)) = &mut l.report {
            *d = depth;
        }
        l
    }

    /// Pages linked to so far (static reports); drains the list.
    pub fn take_refs(&self) -> Vec<Ref> {
        self.report
            .as_ref()
            .map(|(_, r)| {
                std::mem::take(&mut *r.lock().unwrap_or_else(|p| p.into_inner()))
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn is_static(&self) -> bool {
        self.report.is_some()
    }

    /// Records the page `r` makes (a report writes it); nothing on the serve.
    fn note(&self, r: impl FnOnce() -> Ref) {
        if let Some((_, refs)) = &self.report {
            refs.lock().unwrap_or_else(|p| p.into_inner()).insert(r());
        }
    }

    /// `server` on the serve, else `file` relative to this page; only the one needed is made
    /// (a report's file name may hash the query, and the compare page makes 5,400 links).
    fn pick(&self, server: impl FnOnce() -> String, file: impl FnOnce() -> String) -> String {
        match &self.report {
            None => server(),
            Some((depth, _)) => format!("{}{}", "../".repeat(*depth), file()),
        }
    }

    pub fn fleet(&self) -> String {
        self.pick(|| "/".into(), || "index.html".into())
    }
    /// Page `n` (from 1) of the fleet's agents; a report's one page lists them all.
    pub fn fleet_page(&self, n: usize) -> String {
        self.paged(self.fleet(), n)
    }
    pub fn compare(&self) -> String {
        self.pick(|| "/compare".into(), || "compare.html".into())
    }
    /// The compare page's CSV or JSON download with the same filters.
    pub fn compare_download(&self, q: &CompareQuery, ext: &str) -> String {
        self.pick(
            || format!("/compare.{ext}{}", query_string(q)),
            || format!("compare.{ext}"),
        )
    }
    pub fn compare_with(&self, q: &CompareQuery) -> String {
        self.pick(
            || format!("/compare{}", query_string(q)),
            || "compare.html".into(),
        )
    }
    pub fn campaigns(&self) -> String {
        self.pick(|| "/campaigns".into(), || "campaigns.html".into())
    }
    /// A campaign's page; empty in a report that does not include it.
    pub fn campaign(&self, id: i64) -> String {
        if self.campaigns.as_ref().is_some_and(|c| !c.contains(&id)) {
            return String::new();
        }
        self.note(|| Ref::Campaign(id));
        self.pick(
            || format!("/campaigns/{id}"),
            || format!("campaigns/{id}.html"),
        )
    }
    /// Page `n` (from 1) of a campaign's jobs; a report's one page lists them all.
    pub fn campaign_page(&self, id: i64, n: usize) -> String {
        self.paged(self.campaign(id), n)
    }
    /// `first`, the link to a paged page's first page, for page `n` (a report has one page).
    fn paged(&self, first: String, n: usize) -> String {
        if n > 1 && !self.is_static() {
            format!("{first}?page={n}")
        } else {
            first
        }
    }
    pub fn alerts(&self) -> String {
        self.pick(|| "/alerts".into(), || "alerts.html".into())
    }
    pub fn groups(&self) -> String {
        self.pick(|| "/groups".into(), || "groups.html".into())
    }
    /// A device's page (ceilings and roofline).
    /// An agent's live page; `None` in the static report (live figures need the serve).
    pub fn agent(&self, agent: &str) -> Option<String> {
        (!self.is_static()).then(|| format!("/agents/{}", segment(agent)))
    }

    /// The agent's live power stream (server-sent events) as its page's script reads it.
    pub fn agent_power_stream(&self, agent: &str) -> String {
        format!("/api/agents/{}/power?rate_hz=2", segment(agent))
    }

    pub fn device(&self, agent: &str, device: &str) -> String {
        self.note(|| Ref::Device(agent.to_string(), device.to_string()));
        self.pick(
            || format!("/devices/{}/{}", segment(agent), segment(device)),
            || format!("devices/{}.html", device_file_key(agent, device)),
        )
    }
    pub fn run(&self, id: i64) -> String {
        self.note(|| Ref::Run(id));
        self.pick(|| format!("/runs/{id}"), || format!("runs/{id}.html"))
    }
    pub fn history(&self, q: &HistoryQuery) -> String {
        self.note(|| {
            Ref::History(HistoryQuery {
                scale: String::new(),
                ..q.clone()
            })
        });
        self.pick(
            || format!("/history{}", query_string(q)),
            || format!("history/{}.html", q.file_key()),
        )
    }
    /// The history's CSV (server only: a report writes it next to the page).
    pub(crate) fn history_csv(&self, q: &HistoryQuery) -> String {
        self.pick(
            || format!("/history.csv{}", query_string(q)),
            || format!("history/{}.csv", q.file_key()),
        )
    }
    /// The other scale of a history (server only; a report has the linear page).
    pub(crate) fn history_scale(&self, q: &HistoryQuery, log: bool) -> String {
        let q = HistoryQuery {
            scale: if log { "log".into() } else { String::new() },
            ..q.clone()
        };
        if self.is_static() {
            return String::new();
        }
        format!("/history{}", query_string(&q))
    }
    pub(crate) fn static_file(&self, name: &str) -> String {
        self.pick(|| format!("/static/{name}"), || format!("static/{name}"))
    }
}
