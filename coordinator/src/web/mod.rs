//! The web dashboard of `gpufleet serve` and of `gpufleet report --html`: pages rendered on the
//! server from the templates in `dashboards/templates` (compiled into the binary), charts drawn as
//! SVG on the server ([`svg`]), one stylesheet and one small optional script. Every page works with
//! JavaScript disabled and without any network beyond the serve.
//!
//! | page | what |
//! | --- | --- |
//! | `/` | the fleet: agents, their state, backends, devices, latest campaign, open alerts |
//! | `/compare` | the matrix: one row per spec, one column per device; `.csv`/`.json` of what is shown |
//! | `/history?spec=&agent=&device=` | one series over time: median with the p10–p90 band, segments, alerts |
//! | `/runs/{id}` | one result: every field, iteration times, the power trace with the kernel window |
//! | `/campaigns`, `/campaigns/{id}` | progress of campaigns and their jobs |
//! | `/alerts` | regressions and improvements; acknowledge with the admin token |

mod links;
mod page;
mod pages;
pub mod report;
mod routes;
pub mod seed;
pub mod svg;

pub use links::{CompareQuery, HistoryQuery, Links, Scope};
pub use page::{CSS, JS, Page, WebError, clip};
pub use routes::pages_router;

#[cfg(test)]
mod tests;
