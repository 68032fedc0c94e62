//! `bundle-merge BUNDLE [DOC…]`: merge nsyskit documents into an evidence bundle, losslessly and atomically
//! → `nsyskit.merge/v1` (with `--stdout`, the merged bundle itself).

use crate::bundle_merge::{self, DocIn, Mode};
use crate::contract::{render, Input, Result, Style};
use crate::flags::bundle_merge::BundleMergeArgs;

use super::{Invocation, Outcome, Output, Stdin};

/// How the documents of standard input are named when it holds Nushell's pipeline.
pub const PIPELINE: &str = "pipeline input";

pub fn run(a: BundleMergeArgs, host: &Invocation) -> Result<Outcome> {
    let mode = if a.check {
        Mode::Check
    } else if a.stdout {
        Mode::Stdout
    } else {
        Mode::Write
    };
    let inputs: Vec<Input> = a.docs.iter().map(|d| Input::parse(d)).collect();
    let doc_paths: Vec<&std::path::Path> = inputs.iter().filter_map(|i| i.path()).collect();
    crate::contract::refuse_output_over_input(&a.bundle, "BUNDLE", &doc_paths)?;
    // standard input when no DOC is given (or named `-`); the pipeline's documents come first when the adapter
    // holds them
    let mut docs: Vec<DocIn> = match &host.stdin {
        Stdin::Bytes(bytes, name) => bundle_merge::docs_from_bytes(bytes, name)?,
        Stdin::Values(values) => {
            values.iter().map(|(v, name)| DocIn { value: v.clone(), source: name.clone(), line: 1 }).collect()
        }
        Stdin::Process | Stdin::None => Vec::new(),
    };
    let files: Vec<Input> =
        if inputs.is_empty() && matches!(host.stdin, Stdin::Process) { vec![Input::Stdin] } else { inputs };
    if files.iter().any(|i| matches!(i, Input::Stdin)) && !matches!(host.stdin, Stdin::Process) {
        host.stdin_allowed("DOC")?;
    }
    docs.extend(bundle_merge::read_docs(&files)?);
    let outcome = bundle_merge::run(&a.bundle, &docs, mode)?;
    let say: Vec<String> = outcome
        .removed_temps
        .iter()
        .map(|t| format!("removed {}, the temporary file of an interrupted earlier run", t.display()))
        .collect();
    if mode == Mode::Stdout {
        // the bundle on stdout, the summary on stderr
        let summary = render(&outcome.report, Style::Compact);
        return Ok(Outcome {
            output: Output::Json(outcome.bundle_text),
            say,
            exit: 0,
            style: a.out.style(),
            stderr: Some(summary),
        });
    }
    let mut o = Outcome::doc(outcome.report, a.out.style());
    o.say = say;
    Ok(o)
}
