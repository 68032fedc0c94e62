//! Ranges a framework or library emits by itself: evidence, never the workload. A PyTorch op under
//! `emit_nvtx()` (`aten::mm`), XLA's own profiler domain (`TSL:XlaModule:…`), NCCL's and cuBLAS's API ranges
//! (`NCCL:ncclCommInitRank`, `ncclAllReduce`) are as many labels as the program has calls, and none of them is
//! an engine step or a phase the user named: no tool picks one as the step, the primary range or the taxonomy
//! prefix (issue #37).
//!
//! The rule is by form, not a list of labels seen (a label of a named NVTX domain is `DOMAIN:message`):
//!
//! | form | framework | examples |
//! |---|---|---|
//! | a library's NVTX domain | that library | `TSL:…` (XLA/TSL), `NCCL:…`, `CCCL:cub::…`, `cuBLAS:…`, `cuDNN:…`, `NVSHMEM:…` |
//! | `namespace::op` (a C++-style namespace) | the framework's ops | `aten::mm`, `c10d::allreduce_`, `flash_attn::_flash_attn_forward`, `autograd::engine::evaluate_function: MmBackward0`, `FSDP::pre_forward (blocks.9)` |
//! | an op annotation of `emit_nvtx` (unfolded) | PyTorch | `aten::mm, op_id = 41599`, `…, seq = 12`, `…, sizes = [[4, 256]]` |
//! | an autograd node or function, a library's private class | PyTorch | `MmBackward0`, `FlashAttnFunc`, `RegisterPostBackwardFunction`, `_NoopSaveInputs` |
//! | a library API call | that library | `ncclAllReduce`, `ncclGroupStart`, `cublasGemmEx`, `cudnnConvolutionForward` |
//! | a collective's record function | PyTorch distributed | `nccl:all_reduce`, `gloo:broadcast`, `record_param_comms` |
//! | PyTorch's own record functions | PyTorch | `Optimizer.step#SGD.step`, `enumerate(DataLoader)#…`, `CUDAGraphNode.replay`, `Torch-Compiled Region: 0/0`, `## Call CompiledFxGraph … ##` |
//! | a name nsys lost | nsys | `[Unknown]` |
//!
//! `ProfilerStep#N` (PyTorch profiler's step) is not a framework op: it is the step ([`crate::step_label`]).

/// NVTX domains registered by libraries (case-insensitive), as nsys prefixes them to a label (`TSL:…`).
pub const LIBRARY_DOMAINS: &[&str] = &[
    "TSL", "XLA", "NCCL", "RCCL", "CCCL", "CUB", "Thrust", "cuBLAS", "cuBLASLt", "cuDNN", "cuFFT", "cuSPARSE",
    "cuSOLVER", "cuRAND", "nvJPEG", "NVSHMEM", "CUPTI", "CUDA", "TensorRT", "TRT", "DALI", "UCX", "UCC", "MPI",
    "oneCCL", "NVTX",
];

/// API prefixes of libraries whose calls appear as NVTX ranges of the default domain.
const LIBRARY_API_PREFIXES: &[&str] =
    &["nccl", "rccl", "cublas", "cublasLt", "cudnn", "cufft", "cusparse", "cusolver", "curand", "nvshmem"];

/// Collective backends of PyTorch's distributed record functions (`nccl:all_reduce`).
const COLLECTIVE_BACKENDS: &[&str] = &["nccl", "gloo", "mpi", "ucc", "xccl", "hccl"];

/// PyTorch's own record-function names (prefixes).
const PYTORCH_RECORD_FUNCTIONS: &[&str] = &[
    "Optimizer.step#",
    "Optimizer.zero_grad#",
    "enumerate(DataLoader)#",
    "CUDAGraphNode.",
    "Torch-Compiled Region",
    "## Call CompiledFxGraph",
    "CompiledFunction",
    "DistributedDataParallel.forward",
    "DataParallel.forward",
    "record_param_comms",
    "cudaStreamIsCapturing",
];

/// The framework or library that emits `label` by itself, None for a label of the user's own.
pub fn framework_of(label: &str) -> Option<&'static str> {
    let l = label.trim();
    if l == crate::export::nvtx::UNKNOWN_NAME {
        return Some("nsys (a name it lost)");
    }
    if l.starts_with("ProfilerStep#") {
        return None;
    }
    // a library's domain: `DOMAIN:message` (a single word before the first ':' and no ':' right after it)
    if let Some((head, rest)) = l.split_once(':') {
        if !rest.starts_with(':') && !head.contains(' ') {
            if LIBRARY_DOMAINS.iter().any(|d| d.eq_ignore_ascii_case(head)) {
                return Some("a library's NVTX domain");
            }
            if COLLECTIVE_BACKENDS.contains(&head) && is_ident(rest) {
                return Some("PyTorch distributed");
            }
        }
    }
    // `namespace::op`: a C++-style namespace (one identifier) first (`aten::mm`, `FSDP::pre_forward (blocks.9)`)
    if let Some((ns, _)) = l.split_once("::") {
        if is_ident(ns) {
            return Some("a framework op (namespace::op)");
        }
    }
    if [", op_id = ", ", seq = ", ", sizes = [", ", input_op_ids = ["].iter().any(|m| l.contains(m)) {
        return Some("PyTorch (emit_nvtx op annotation)");
    }
    if PYTORCH_RECORD_FUNCTIONS.iter().any(|p| l.starts_with(p)) {
        return Some("PyTorch (its own record function)");
    }
    if is_camel_ident(l) && (ends_with_backward(l) || l.ends_with("Func") || l.ends_with("Function")) {
        return Some("PyTorch autograd");
    }
    // a library's private class (`_NoopSaveInputs`): an underscore, then a capital
    if l.strip_prefix('_').is_some_and(is_camel_ident) {
        return Some("a library's private class");
    }
    if LIBRARY_API_PREFIXES.iter().any(|p| {
        l.strip_prefix(p).is_some_and(|r| r.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && is_ident(r))
    }) {
        return Some("a library API call");
    }
    None
}

/// Is `label` a framework's own range ([`framework_of`])?
pub fn is_framework(label: &str) -> bool {
    framework_of(label).is_some()
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_camel_ident(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && is_ident(s)
}

/// `MmBackward0`, `AddmmBackward`.
fn ends_with_backward(s: &str) -> bool {
    s.trim_end_matches(|c: char| c.is_ascii_digit()).ends_with("Backward")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frameworks_own_ranges() {
        for l in [
            "aten::copy_",
            "aten::mm, op_id = 41599",
            "c10d::allreduce_",
            "flash_attn::_flash_attn_forward",
            "autograd::engine::evaluate_function: AddmmBackward0",
            "torch::autograd::AccumulateGrad",
            "AddmmBackward0",
            "FlashAttnFunc",
            "FSDP::pre_forward (blocks.9._checkpoint_wrapped_module)",
            "RegisterPostBackwardFunction",
            "_NoopSaveInputs",
            "TSL:XlaModule:#hlo_module=jit_decode,program_id=7#",
            "TSL:XlaPass:simplify",
            "NCCL:ncclCommInitRank",
            "CCCL:cub::DeviceReduce::Sum",
            "ncclSend",
            "ncclGroupStart",
            "cublasGemmEx",
            "nccl:all_reduce",
            "record_param_comms",
            "Optimizer.step#SGD.step",
            "CUDAGraphNode.replay",
            "Torch-Compiled Region: 0/0",
            "[Unknown]",
        ] {
            assert!(is_framework(l), "{l}");
        }
    }

    #[test]
    fn the_users_own_labels() {
        for l in [
            "vibeserve.engine.iteration",
            "jaxdec.step",
            "hf.decode_step",
            "EngineCore.step",
            "ProfilerStep#12",
            "ProfilerStep#<n>",
            "decoder",
            "forward_block",
            "test",
            "find_centers",
            "inj.work",
            "Decoder",
            "train step 3",
            "nccl",
            "ncclish",
            "my:phase",
        ] {
            assert!(!is_framework(l), "{l}");
        }
    }
}
