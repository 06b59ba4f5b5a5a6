//! A page ready to render (its template and context), the templates and assets compiled into the
//! binary, the errors a page can end in, and how much of a user's input an error quotes back.

use minijinja::Environment;
use std::sync::OnceLock;

/// The dashboard's stylesheet.
pub const CSS: &str = include_str!("../../../dashboards/static/gpufleet.css");
/// The dashboard's one script (table sorting); pages work without it.
pub const JS: &str = include_str!("../../../dashboards/static/gpufleet.js");

const TEMPLATES: &[(&str, &str)] = &[
    (
        "base.html",
        include_str!("../../../dashboards/templates/base.html"),
    ),
    (
        "alert_table.html",
        include_str!("../../../dashboards/templates/alert_table.html"),
    ),
    (
        "fleet.html",
        include_str!("../../../dashboards/templates/fleet.html"),
    ),
    (
        "compare.html",
        include_str!("../../../dashboards/templates/compare.html"),
    ),
    (
        "history.html",
        include_str!("../../../dashboards/templates/history.html"),
    ),
    (
        "run.html",
        include_str!("../../../dashboards/templates/run.html"),
    ),
    (
        "campaigns.html",
        include_str!("../../../dashboards/templates/campaigns.html"),
    ),
    (
        "campaign.html",
        include_str!("../../../dashboards/templates/campaign.html"),
    ),
    (
        "alerts.html",
        include_str!("../../../dashboards/templates/alerts.html"),
    ),
    (
        "groups.html",
        include_str!("../../../dashboards/templates/groups.html"),
    ),
    (
        "error.html",
        include_str!("../../../dashboards/templates/error.html"),
    ),
    (
        "device.html",
        include_str!("../../../dashboards/templates/device.html"),
    ),
    (
        "agent.html",
        include_str!("../../../dashboards/templates/agent.html"),
    ),
];

fn templates() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        for (name, source) in TEMPLATES {
            // The templates are part of the binary and checked by a test: a syntax error is a bug.
            env.add_template(name, source)
                .unwrap_or_else(|e| panic!("dashboard template {name}: {e}"));
        }
        env
    })
}

/// Why a page could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// Nothing has that id or key (404).
    #[error("{0}")]
    NotFound(String),
    /// A query parameter is wrong (400).
    #[error("{0}")]
    BadRequest(String),
    /// The store failed (500).
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A template failed to render (500; a bug).
    #[error("rendering {0}: {1}")]
    Render(String, String),
}

/// A page ready to render: its template and context.
#[derive(Debug)]
pub struct Page {
    pub template: &'static str,
    pub context: serde_json::Value,
}

impl Page {
    /// The HTML of the page.
    ///
    /// # Errors
    /// [`WebError::Render`] if the template fails (a bug, caught by the tests).
    pub fn render(&self) -> Result<String, WebError> {
        let t = templates()
            .get_template(self.template)
            .map_err(|e| WebError::Render(self.template.into(), e.to_string()))?;
        t.render(minijinja::Value::from_serialize(&self.context))
            .map_err(|e| WebError::Render(self.template.into(), format!("{e:#}")))
    }
}

/// At most this much of a user's input is quoted back in an error.
pub fn clip(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}
