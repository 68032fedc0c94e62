//! `sqlite-ranges`: exact NVTX range attribution on an nsys SQLite export → `nsyskit.ranges/v1`.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use nsyskit::contract::cli::{emit, main_with, report_error, OutputArgs};
use nsyskit::iterations::window::{self, parse_iterations, IterationArgs, Windowed};
use nsyskit::ranges::{self, RangesOptions};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Json,
    Table,
}

/// Attribute CUDA runtime calls and device work (kernels, memcpys, memsets, graph replays) to NVTX ranges of an
/// nsys SQLite export, per label: wall time, device coverage, busy union, idle in span, syncs, nesting.
#[derive(Debug, Parser)]
#[command(
    name = "sqlite-ranges",
    version,
    after_help = "Examples:\n  sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    --range-prefix vibeserve. --format table\n  sqlite-ranges fixtures/nsys-2023.4.4/gpu_range_node.sqlite --compact \\\n    | jq '.ranges[0]'\n  sqlite-ranges fixtures/nsys-2025.3.1/gpu_full_node.sqlite --no-fold \\\n    --compact | jq '.ranges | length'"
)]
struct Args {
    /// The export written by `nsys export --type sqlite` (or an .nsys-rep, exported into a temporary folder;
    /// `-` reads the SQLite file from stdin)
    #[arg(value_name = "EXPORT")]
    export: String,
    /// Keep only labels starting with this case-sensitive prefix (a domain's labels start with `DOMAIN:`)
    #[arg(long, value_name = "P")]
    range_prefix: Option<String>,
    /// Keep only occurrences lying inside [START, END] (ns, the export's clock): START <= start and end <= END
    #[arg(long, value_name = "START:END", allow_hyphen_values = true)]
    window: Option<String>,
    /// Keep id-bearing labels as they are (`aten::mm, op_id = 41599`, `vibeserve.request.3`); by default they
    /// are folded into stable ones (`aten::mm`, `vibeserve.request.<n>`) and the `folded` section says how
    #[arg(long)]
    no_fold: bool,
    /// Iteration records of the engine (JSON lines, docs/iterations.md): joined to the step occurrences by
    /// time (clock offset measured); the `iterations` section lists each step occurrence with its iteration
    #[arg(long, value_name = "FILE")]
    iteration_records: Option<PathBuf>,
    /// Analyse only iterations START..=END: engine iteration indices with --iteration-records, else occurrence
    /// indices (0-based, by start) of the step label; a window selecting no iteration is RETRY (exit 1)
    #[arg(long, value_name = "START:END", allow_hyphen_values = true)]
    iterations: Option<String>,
    /// The step label for --iteration-records/--iterations (default: the iteration label, chosen as
    /// step-budget does)
    #[arg(long, value_name = "LABEL")]
    step: Option<String>,
    /// Output format: the JSON document, or a human table
    #[arg(long, value_enum, default_value = "json")]
    format: Format,
    /// The nsys used to export an .nsys-rep (default: $NSYS_BIN, else nsys on PATH)
    #[arg(long, value_name = "PATH")]
    nsys: Option<PathBuf>,
    #[command(flatten)]
    out: OutputArgs,
}

fn main() {
    main_with("sqlite-ranges", || {
        let a = Args::parse();
        ranges::set_progress(std::io::stderr().is_terminal());
        let result = (|| {
            let window = a.window.as_deref().map(ranges::parse_window).transpose()?;
            let opts = RangesOptions { range_prefix: a.range_prefix.clone(), window, fold: !a.no_fold };
            let it = IterationArgs {
                records: a.iteration_records.clone(),
                iterations: a.iterations.as_deref().map(parse_iterations).transpose()?,
                step: a.step.clone(),
                fold: !a.no_fold,
            };
            if a.step.is_some() && !it.any() {
                return Err(nsyskit::contract::Error::usage(
                    "--step is for --iteration-records or --iterations (sqlite-ranges reports every label)",
                )
                .with_arg("--step"));
            }
            if it.any() {
                return if a.export == "-" {
                    let copy = nsyskit::export::StdinCopy::read()?;
                    let mut w = copy.run(|p| window::ranges_run(p, &opts, a.nsys.as_deref(), &it))?;
                    match &mut w {
                        Windowed::Doc(d) => d.source.path = nsyskit::export::STDIN_NAME.into(),
                        Windowed::Retry(d) => d.source = nsyskit::export::STDIN_NAME.into(),
                    }
                    Ok(w)
                } else {
                    window::ranges_run(std::path::Path::new(&a.export), &opts, a.nsys.as_deref(), &it)
                };
            }
            if a.export == "-" {
                let copy = nsyskit::export::StdinCopy::read()?;
                let mut doc = copy.run(|p| ranges::run(p, &opts, a.nsys.as_deref()))?;
                doc.source.path = nsyskit::export::STDIN_NAME.into();
                Ok(Windowed::Doc(doc))
            } else {
                ranges::run(std::path::Path::new(&a.export), &opts, a.nsys.as_deref()).map(Windowed::Doc)
            }
        })();
        match (a.format, result) {
            (_, Ok(Windowed::Retry(d))) => {
                eprintln!("sqlite-ranges: RETRY: {}", d.reason);
                emit("sqlite-ranges", Ok(*d), a.out.style())
            }
            (Format::Table, Ok(Windowed::Doc(doc))) => {
                print!("{}", ranges::render_table(&doc));
                0
            }
            (Format::Table, Err(e)) | (Format::Json, Err(e)) => report_error("sqlite-ranges", &e),
            (Format::Json, Ok(Windowed::Doc(doc))) => emit("sqlite-ranges", Ok(doc), a.out.style()),
        }
    })
}
