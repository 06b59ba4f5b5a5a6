//! Regression detection: is a new result a real change from its series' baseline?
//!
//! | file | part |
//! | --- | --- |
//! | `detect.rs` | the verdict on one series: robust baseline, noise-aware bound, confirmation (pure) |
//! | `check.rs` | the store side: verdicts for new results, confirmation reruns, alerts |

pub mod check;
pub mod detect;
