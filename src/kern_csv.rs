//! `kern-csv-to-json`: `nsys stats --format csv` output to typed JSON (stub, see issue 2).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Tool};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct KernCsvDoc {
    pub schema: String,
    pub tool: Tool,
}

impl Document for KernCsvDoc {
    const KIND: &'static str = "kernel-summary";
    const TOOL: &'static str = "kern-csv-to-json";
}
