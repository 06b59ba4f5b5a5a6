//! A small SVG writer for the dashboard's charts: drawn on the server, so every chart shows with
//! JavaScript disabled, and each mark carries a `<title>` tooltip. The charts: a series over time
//! with a band ([`series_chart`]), a histogram of iteration times ([`histogram`]), a power trace
//! with the kernel window ([`power_chart`]), a device's roofline ([`roofline_chart`]), the
//! compare page's devices side by side ([`compare_chart`]) and the groups page's sibling devices
//! along one spec ([`strip_chart`]).
//!
//! # Layout
//!
//! `canvas` holds what every chart draws with (the axis, the document, escaping); each chart has
//! a file of its own: `series`, `histogram`, `roofline`, `power`, `compare`, `strip`.

mod canvas;
mod compare;
mod histogram;
mod power;
mod roofline;
mod series;
mod strip;

pub use self::canvas::{esc, short};
pub use self::compare::{RatioCell, RatioRow, compare_chart};
pub use self::histogram::histogram;
pub use self::power::{PowerReading, power_chart};
pub use self::roofline::{Roof, RoofPoint, roofline_chart};
pub use self::series::{Boundary, SeriesPoint, series_chart};
pub use self::strip::{StripDot, strip_chart};
