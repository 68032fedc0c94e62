//! `sqlite-ranges`: its flags, for the binary and the Nushell command (see docs/sqlite-ranges.md).

use std::path::PathBuf;

use crate::contract::cli::OutputArgs;

/// `--format`: the JSON document or a human table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Table,
}

/// Attribute CUDA runtime calls and device work (kernels, memcpys, memsets, graph replays) to NVTX ranges of an
/// nsys SQLite export, per label: wall time, device coverage, busy union, idle in span, syncs, nesting.
#[derive(Debug, clap::Parser, Clone)]
#[command(
    name = "sqlite-ranges",
    version,
    after_help = "Examples:\n  sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --range-prefix vibeserve. --format table\n  sqlite-ranges fixtures/nsys-2023.4.4/gpu_range_node.sqlite --compact \\\n    | jq '.ranges[0]'\n  sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite --no-fold \\\n    --compact | jq '.ranges | length'"
)]
pub struct SqliteRangesArgs {
    /// The export written by `nsys export --type sqlite` (or an .nsys-rep, exported into a temporary folder;
    /// `-` reads the SQLite file from stdin)
    #[arg(value_name = "EXPORT")]
    pub export: String,
    /// Keep only labels starting with this case-sensitive prefix (a domain's labels start with `DOMAIN:`)
    #[arg(long, value_name = "P")]
    pub range_prefix: Option<String>,
    /// Keep only occurrences lying inside [START, END] (ns, the export's clock): START <= start and end <= END
    #[arg(long, value_name = "START:END", allow_hyphen_values = true)]
    pub window: Option<String>,
    /// Keep id-bearing labels as they are (`aten::mm, op_id = 41599`, `vibeserve.request.3`); by default they
    /// are folded into stable ones (`aten::mm`, `vibeserve.request.<n>`) and the `folded` section says how
    #[arg(long)]
    pub no_fold: bool,
    /// Iteration records of the engine (JSON lines, docs/iterations.md): joined to the step occurrences by
    /// time (clock offset measured); the `iterations` section lists each step occurrence with its iteration
    #[arg(long, value_name = "FILE")]
    pub iteration_records: Option<PathBuf>,
    /// Analyse only iterations START..=END: engine iteration indices with --iteration-records, else occurrence
    /// indices (0-based, by start) of the step label; a window selecting no iteration is RETRY (exit 1)
    #[arg(long, value_name = "START:END", allow_hyphen_values = true)]
    pub iterations: Option<String>,
    /// The step label for --iteration-records/--iterations (default: the iteration label, chosen as
    /// step-budget does)
    #[arg(long, value_name = "LABEL")]
    pub step: Option<String>,
    /// Output format: the JSON document, or a human table
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
    /// The nsys used to export an .nsys-rep (default: $NSYS_BIN, else nsys on PATH)
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl SqliteRangesArgs {
    /// The library's options for these flags (a bad `--window` is a usage error naming it).
    pub fn options(&self) -> crate::contract::Result<crate::sqlite_ranges::RangesOptions> {
        let window = self.window.as_deref().map(crate::sqlite_ranges::parse_window).transpose()?;
        Ok(crate::sqlite_ranges::RangesOptions { range_prefix: self.range_prefix.clone(), window, fold: !self.no_fold })
    }
}

impl SqliteRangesArgs {
    /// `--iteration-records`, `--iterations` and `--step` as the library's iteration window (`--step` alone is
    /// a usage error naming it).
    pub fn iteration_args(&self) -> crate::contract::Result<crate::iterations::window::IterationArgs> {
        let it = crate::iterations::window::IterationArgs {
            records: self.iteration_records.clone(),
            iterations: self.iterations.as_deref().map(crate::iterations::window::parse_iterations).transpose()?,
            step: self.step.clone(),
            fold: !self.no_fold,
        };
        if it.step.is_some() && !it.any() {
            return Err(crate::contract::Error::usage(
                "--step is for --iteration-records or --iterations (sqlite-ranges reports every label)",
            )
            .with_arg("--step"));
        }
        Ok(it)
    }
}
