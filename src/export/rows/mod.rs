//! Typed row readers over the nsys tables. Rows are streamed (one callback per row, no copy of a table), the
//! columns are type-checked (a value of another type than nsys writes is an input error naming the table and
//! column), and timed rows are checked once here for every tool:
//!
//! - a timestamp beyond ±[`MAX_TIMESTAMP_NS`] is impossible: an input error naming the table, column and row id;
//! - a row of a timed CUDA table (runtime, kernel, memcpy, memset, graph trace, synchronization) with a NULL
//!   `start`, a NULL `end` or `end < start` is not delivered: it is counted in [`RowSkips`] by table and reason.
//!
//! NVTX rows are delivered as they are (open and inverted ranges are the ranges contract's own `skipped`).
//!
//! The files: [`records`] (the row types, [`RowSkips`]), [`cells`] (typed cells, timestamp checks),
//! [`streamed`] (the per-row readers), [`lookups`] (strings, processes, threads, small tables), [`aggregates`]
//! (SQL aggregates), [`stats`] and [`nvtx_facts`] (one scan per timed table), [`facts`] (the facts scans
//! share between connections), [`source`] (parallel scans' connections and rowid chunks), [`device`] (device
//! rows in bulk). The parallel readers themselves are in `bulk.rs` and `fold.rs`, which import this module
//! (never the other way round).

use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::types::ValueRef;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Error, Result};
use crate::export::raw::{IntCell, RawQuery, RawRow};
use crate::export::schema::{self, cols, DeviceKind, MAX_TIMESTAMP_NS};
use crate::export::Export;

mod aggregates;
mod cells;
mod device;
mod facts;
mod lookups;
mod nvtx_facts;
mod records;
mod source;
mod stats;
mod streamed;

pub(crate) use cells::*;
pub use device::*;
pub(crate) use facts::*;
pub use lookups::*;
pub use nvtx_facts::*;
pub use records::*;
pub use source::*;
pub use stats::*;
pub use streamed::*;
