//! The pipeline layer: runs that combine several analyses on one capture, above the analyses and below the
//! tools (`src/tools/`).
//!
//! - [`load`]: [`crate::evidence::Evidence`] from a bundle, a ranges document or an export (stdin and FIFOs
//!   spooled to a private temporary file); from an export it runs the ranges analysis, the step budget's device
//!   timelines and gate-check on one open export.
//! - [`report`]: `report`, the evidence loaded once; with `--iterations` the window is resolved first.
//! - [`window`]: `sqlite-ranges` and `step-budget` over an iteration window (a RETRY is a value,
//!   [`crate::iterations::window::Windowed::Retry`]).
//! - [`shared`]: `gate-check --ranges/--nvtx-readiness/--report`: the documents of several tools from one pass
//!   over each big table.

pub mod load;
pub mod report;
pub mod shared;
pub mod window;

pub use load::{load, load_with};
pub use shared::{run_shared, AlsoDocs, SharedDocs};
