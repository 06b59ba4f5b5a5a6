//! The pages' data: each page module reads the store and returns a [`Page`] (template and
//! context); the shared layout (navigation, title, generated time) is here. The same functions
//! serve `gpufleet serve` and the static `gpufleet report`; only [`Links`] differs (absolute server
//! paths, or relative file names).
//!
//! | module | page |
//! | --- | --- |
//! | `fleet.rs` | `/`: agents, their state, backends, devices, latest campaign, open alerts |
//! | `compare.rs` | `/compare` and its CSV/JSON: the matrix of the latest results |
//! | `history.rs` | `/history` and its CSV: one series over time |
//! | `run.rs` | `/runs/{id}`: one result with its charts |
//! | `device.rs` | `/devices/{agent}/{device}`: a device's ceilings and roofline |
//! | `agent.rs` | `/agents/{name}`: an agent's live power (serve only) |
//! | `campaigns.rs` | `/campaigns`, `/campaigns/{id}` |
//! | `alerts.rs` | `/alerts`, and the alert table other pages embed |
//! | `groups.rs` | `/groups`: sibling devices compared, one strip per spec, outliers marked |

pub mod agent;
pub mod alerts;
pub mod campaigns;
pub mod compare;
pub mod device;
pub mod fleet;
pub mod groups;
pub mod history;
pub mod run;

use super::links::Links;
use super::page::{Page, WebError};
use crate::store::Store;
use crate::time::fmt_time;
use serde_json::{Map, Value, json};

/// What every page's layout needs.
fn base(
    links: &Links,
    store: &Store,
    title: &str,
    page: &str,
) -> Result<Map<String, Value>, WebError> {
    let open_alerts = store.alert_count(true)?;
    let mut m = Map::new();
    m.insert("title".into(), json!(title));
    m.insert("page".into(), json!(page));
    m.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    m.insert("generated".into(), json!(fmt_time(crate::time::now())));
    m.insert("is_static".into(), json!(links.is_static()));
    m.insert(
        "nav".into(),
        json!({
            "fleet": links.fleet(), "compare": links.compare(), "campaigns": links.campaigns(),
            "alerts": links.alerts(), "groups": links.groups(), "css": links.static_file("gpufleet.css"),
            "js": links.static_file("gpufleet.js"), "open_alerts": open_alerts,
        }),
    );
    Ok(m)
}

fn page(template: &'static str, mut m: Map<String, Value>, extra: Value) -> Page {
    if let Value::Object(e) = extra {
        m.extend(e);
    }
    Page {
        template,
        context: Value::Object(m),
    }
}

/// An error page.
pub fn error_page(links: &Links, store: &Store, message: &str) -> Result<Page, WebError> {
    let m = base(links, store, "Not available", "")?;
    Ok(page("error.html", m, json!({ "message": message })))
}

/// The rows of a paged listing this page shows, and its pager (`None` when one page holds them
/// all, and in a static report, which lists every row). `at(p)` is page `p`'s link.
fn page_rows(
    total: usize,
    per_page: usize,
    page: Option<usize>,
    links: &Links,
    at: impl Fn(usize) -> String,
) -> Result<(std::ops::Range<usize>, Option<Value>), WebError> {
    if links.is_static() || total <= per_page {
        return Ok((0..total, None));
    }
    let page = page.unwrap_or(1);
    let pages = total.div_ceil(per_page);
    if page == 0 || page > pages {
        return Err(WebError::BadRequest(format!(
            "page {page} does not exist: this view has pages 1 to {pages}"
        )));
    }
    let from = (page - 1) * per_page;
    let to = (from + per_page).min(total);
    let pager = json!({
        "from": from + 1, "to": to, "total": total, "page": page, "pages": pages,
        "prev_href": (page > 1).then(|| at(page - 1)),
        "next_href": (page < pages).then(|| at(page + 1)),
    });
    Ok((from..to, Some(pager)))
}
