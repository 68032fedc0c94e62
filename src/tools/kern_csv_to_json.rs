//! `kern-csv-to-json [CSV]`: an `nsys stats --format csv` report → `nsyskit.stats/v1`. From a file or the
//! process's standard input the rows are streamed (a large trace report is never held in memory); from text
//! the adapter already holds (Nushell's pipeline), converted in memory.

use crate::contract::{Input, Result};
use crate::flags::kern_csv_to_json::KernCsvToJsonArgs;
use crate::kern_csv_to_json;

use super::{Invocation, Outcome, Output, Stdin};

pub fn run(a: KernCsvToJsonArgs, host: &Invocation) -> Result<Outcome> {
    let opts = a.options();
    let style = a.out.style();
    let input = Input::parse(&a.input);
    if let (Input::Stdin, Stdin::Bytes(bytes, name)) = (&input, &host.stdin) {
        return Ok(Outcome::doc(kern_csv_to_json::convert(bytes, name, None, None, &opts)?, style));
    }
    if matches!(input, Input::Stdin) {
        host.stdin_allowed("INPUT")?;
    }
    let write = move |out: &mut dyn std::io::Write| kern_csv_to_json::run_to_writer(&input, &opts, style, out);
    Ok(Outcome { output: Output::Stream(Box::new(write)), say: Vec::new(), exit: 0, style, stderr: None })
}
