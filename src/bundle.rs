//! `bundle-merge`: merge nsyskit documents into an evidence bundle (stub, see issue 2).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Document, Tool};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MergeReport {
    pub schema: String,
    pub tool: Tool,
}

impl Document for MergeReport {
    const KIND: &'static str = "bundle-merge";
    const TOOL: &'static str = "bundle-merge";
}
