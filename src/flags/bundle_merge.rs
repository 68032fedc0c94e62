//! `bundle-merge`: its flags, for the binary and the Nushell command (see docs/bundle-merge.md).

use std::path::PathBuf;

use crate::contract::cli::OutputArgs;

/// Merge nsyskit documents (files, or stdin when none is given: one, concatenated or NDJSON) into BUNDLE,
/// each at the place its `schema` kind owns (see docs/bundle-merge.md); every other byte of the bundle stays
/// as it was. Creates BUNDLE when absent; writes atomically under a lock on BUNDLE.lock. Prints a summary of
/// what went where. Exit 0 merged (a RETRY gate is recorded too), 1 with --check when the merge would change
/// the bundle, 2 bad bundle or bad document (the bundle is left byte-identical).
#[derive(clap::Parser, Clone)]
#[command(
    name = "bundle-merge",
    version,
    after_help = "Examples:\n  kern-csv-to-json \\\n    fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv > k.json\n  bundle-merge bundle.json k.json\n  gate-check fixtures/nsys-2025.3.1/gpu_full_node.sqlite \\\n    | bundle-merge bundle.json\n  bundle-merge --check bundle.json k.json  # exit 0: nothing would change"
)]
pub struct BundleMergeArgs {
    /// The evidence bundle (a JSON object; created when absent)
    pub bundle: PathBuf,
    /// nsyskit documents to merge, in order (`-` = stdin; default: stdin)
    pub docs: Vec<String>,
    /// Write nothing; say whether the merge would change the bundle (`changed`; the binary exits 1 when it would)
    #[arg(long, conflicts_with = "stdout")]
    pub check: bool,
    /// Write nothing; give the merged bundle instead of the summary (the binary prints it on stdout, the summary on stderr)
    #[arg(long)]
    pub stdout: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}
