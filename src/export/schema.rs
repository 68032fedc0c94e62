//! The names of the nsys SQLite schema that nsyskit reads: tables, columns and NVTX event type codes.
//!
//! Every SQL statement over an nsys table is written in [`crate::export`] with these names; no other module
//! spells a table name in SQL. Differences between nsys versions are resolved here once:
//!
//! | what | nsys 2023.4.4 | nsys 2025.3.1 | read as |
//! |---|---|---|---|
//! | graph node-building events | `CUDA_GRAPH_EVENTS` | `CUDA_GRAPH_NODE_EVENTS` (and `CUDA_GRAPH_EVENTS` for graph-level events) | [`GRAPH_NODE_EVENTS_TABLES`], the first present |
//! | profiler diagnostics | absent | `DIAGNOSTIC_EVENT` | optional |
//! | export metadata | `META_DATA_EXPORT` (2022.1: `EXPORT_META_DATA`; ≈2021.3: none) | `META_DATA_EXPORT` | [`EXPORT_META_TABLES`], the first present; none: every fact it holds is unknown, with that reason |
//! | informational text (`TARGET_INFO_SYSTEM_ENV.value`…) | 2021.3–2022.4: `GpuInfo` is a protobuf blob stored as TEXT | UTF-8 | decoded lossily, recorded ([`crate::export::Export::lossy_reads`]) |
//! | `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION` sync type | `syncType` | `syncType` (+ `deprecatedSyncType`, values differ) | not interpreted |
//! | NVTX message | `text` or `textId` → `StringIds` | same | [`crate::export::Export::nvtx_events`] resolves both |
//!
//! Tables are created lazily by nsys: a capture without CUDA has no `CUPTI_*` table at all, so every CUDA
//! table is optional; a table that is present must have the columns read from it.

pub const STRING_IDS: &str = "StringIds";
pub const NVTX_EVENTS: &str = "NVTX_EVENTS";
pub const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
pub const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
pub const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
pub const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
pub const GRAPH_TRACE: &str = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE";
pub const SYNCHRONIZATION: &str = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";
pub const PROCESSES: &str = "PROCESSES";
/// OS runtime calls (`--trace=osrt`).
pub const OSRT_API: &str = "OSRT_API";
pub const THREAD_NAMES: &str = "ThreadNames";
pub const TARGET_INFO_GPU: &str = "TARGET_INFO_GPU";
pub const TARGET_INFO_SESSION_START_TIME: &str = "TARGET_INFO_SESSION_START_TIME";
/// `name, value` rows of the target system (`CudaDriverVersion`, `DeviceEnvironment`, …).
pub const TARGET_INFO_SYSTEM_ENV: &str = "TARGET_INFO_SYSTEM_ENV";
pub const META_DATA_CAPTURE: &str = "META_DATA_CAPTURE";
pub const META_DATA_EXPORT: &str = "META_DATA_EXPORT";
/// nsys 2022.1 (export schema 2.9.1) name of the export-metadata table.
pub const EXPORT_META_DATA: &str = "EXPORT_META_DATA";
/// Where the export's own metadata (`EXPORT_PRODUCT_VERSION`, `EXPORT_SCHEMA_VERSION`…) is, newest name
/// first; ≈2021.3 exports have neither.
pub const EXPORT_META_TABLES: [&str; 2] = [META_DATA_EXPORT, EXPORT_META_DATA];
pub const DIAGNOSTIC_EVENT: &str = "DIAGNOSTIC_EVENT";
/// CPU IP/backtrace samples (`--sample=process-tree|system-wide`): one row per sample.
pub const COMPOSITE_EVENTS: &str = "COMPOSITE_EVENTS";
/// The call stack of each sample: `(id, stackDepth)` → `symbol`, `module` (StringIds); depth 0 is the leaf.
pub const SAMPLING_CALLCHAINS: &str = "SAMPLING_CALLCHAINS";
/// `META_DATA_CAPTURE` name of the CPU sampling period (CPU-clock nanoseconds between samples; 2 000 000 by
/// default in nsys 2025.3.1).
pub const SAMPLING_PERIOD_SETTING: &str = "LINUX_PERF_OPTIONS:SAMPLING_PERIOD";
/// The capture's duration and its bounds on the export's clock (one row).
pub const ANALYSIS_DETAILS: &str = "ANALYSIS_DETAILS";
/// nsys 2025.3 name of the graph node-building events table.
pub const CUDA_GRAPH_NODE_EVENTS: &str = "CUDA_GRAPH_NODE_EVENTS";
/// nsys 2023.4 name of the graph node-building events table (2025.3 keeps it for graph-level events).
pub const CUDA_GRAPH_EVENTS: &str = "CUDA_GRAPH_EVENTS";
/// Where node-building events are, newest name first.
pub const GRAPH_NODE_EVENTS_TABLES: [&str; 2] = [CUDA_GRAPH_NODE_EVENTS, CUDA_GRAPH_EVENTS];

/// Tables whose rows are events of a capture: an export with a row in none of them, and no session start,
/// holds no capture ([`crate::export::Export::refuse_incomplete`]).
pub const EVENT_TABLES: [&str; 10] =
    [NVTX_EVENTS, RUNTIME, KERNEL, MEMCPY, MEMSET, GRAPH_TRACE, SYNCHRONIZATION, "OSRT_API", PROCESSES, THREAD_NAMES];

/// The device activity tables, in the order of the ranges contract (index = [`DeviceKind`] as usize).
pub const DEVICE_TABLES: [&str; 4] = [KERNEL, MEMCPY, MEMSET, GRAPH_TRACE];

/// The device tables that can carry node-level graph rows (`graphNodeId` set): a graph node is a kernel, a
/// memcpy or a memset; GRAPH_TRACE rows are whole graph-level replays, never nodes.
pub const NODE_LEVEL_TABLES: [&str; 3] = [KERNEL, MEMCPY, MEMSET];

/// One of [`DEVICE_TABLES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    Kernel = 0,
    Memcpy = 1,
    Memset = 2,
    GraphTrace = 3,
}

impl DeviceKind {
    pub const ALL: [DeviceKind; 4] =
        [DeviceKind::Kernel, DeviceKind::Memcpy, DeviceKind::Memset, DeviceKind::GraphTrace];
    pub fn table(self) -> &'static str {
        DEVICE_TABLES[self as usize]
    }
}

/// Columns read from each table.
pub mod cols {
    pub const STRING_IDS: [&str; 2] = ["id", "value"];
    /// Required NVTX columns (`domainId` is read when present).
    pub const NVTX_EVENTS: [&str; 6] = ["start", "end", "eventType", "text", "textId", "globalTid"];
    pub const RUNTIME: [&str; 5] = ["start", "end", "globalTid", "correlationId", "nameId"];
    pub const DEVICE: [&str; 5] = ["start", "end", "globalPid", "correlationId", "deviceId"];
    pub const PROCESSES: [&str; 3] = ["globalPid", "pid", "name"];
    pub const THREAD_NAMES: [&str; 2] = ["nameId", "globalTid"];
    pub const NAME_VALUE: [&str; 2] = ["name", "value"];
    pub const DIAGNOSTIC_EVENT: [&str; 3] = ["timestamp", "severity", "text"];
    pub const SYNCHRONIZATION: [&str; 4] = ["start", "end", "globalPid", "correlationId"];
    pub const OSRT_API: [&str; 4] = ["start", "end", "globalTid", "nameId"];
    pub const COMPOSITE_EVENTS: [&str; 3] = ["id", "start", "globalTid"];
    pub const SAMPLING_CALLCHAINS: [&str; 4] = ["id", "symbol", "module", "stackDepth"];
    pub const GRAPH_NODE_ID: &str = "graphNodeId";
    pub const DEMANGLED_NAME: &str = "demangledName";
    pub const DOMAIN_ID: &str = "domainId";
    /// Device tables: the CUDA stream (read when present, by step-budget).
    pub const STREAM_ID: &str = "streamId";
    /// TARGET_INFO_GPU: `name`, then these when present.
    /// `TARGET_INFO_SESSION_START_TIME`: the capture's UTC start.
    pub const SESSION_START_TIME: [&str; 1] = ["utcTime"];
    /// `TARGET_INFO_GPU`: the GPU's name.
    pub const GPU_NAME: [&str; 1] = ["name"];
    /// `ANALYSIS_DETAILS`: duration and bounds (ns).
    pub const ANALYSIS_DETAILS: [&str; 3] = ["duration", "startTime", "stopTime"];
    pub const GPU_DETAILS: [&str; 4] = ["chipName", "smCount", "totalMemory", "clockRate"];
}

/// `NVTX_EVENTS.eventType` codes (nsys `NvtxEventType`).
pub mod nvtx {
    /// `nvtxMark`: an instant.
    pub const MARK: i64 = 34;
    /// `nvtxRangePush`/`nvtxRangePop`: a push/pop range (nested per thread).
    pub const PUSH_POP: i64 = 59;
    /// `nvtxRangeStart`/`nvtxRangeEnd`: a start/end range (may cross threads).
    pub const START_END: i64 = 60;
    /// `nvtxDomainCreate`: names the domain `domainId` of its process.
    pub const DOMAIN_CREATE: i64 = 75;
    /// The range event types.
    pub const RANGES: [i64; 2] = [PUSH_POP, START_END];
}

/// Keys of `TARGET_INFO_SYSTEM_ENV` (`name, value` rows) the capture header reads.
pub mod system_env_keys {
    /// The NVIDIA driver version (`0` on a machine without a driver).
    pub const NV_DRIVER_VERSION: &str = "NvDriverVersion";
    /// The CUDA version the driver supports (`13000` = 13.0).
    pub const CUDA_DRIVER_VERSION: &str = "CudaDriverVersion";
}

/// nsys's own message in `StringIds` when it could not decode an NVTX payload (a SQL `LIKE` pattern; measured:
/// Python `nvtx` 0.2.17 under nsys 2023.4.4: `NVTX binary payload extension is incompatible…`).
pub const NVTX_INCOMPATIBLE_LIKE: &str = "%NVTX%incompatible%";

/// nsys's `DIAGNOSTIC_EVENT` warning for a process whose CUDA buffers were not all written (measured: the forked
/// engine of held-out `engine_fork`, 3 CUDA events kept; also a capture range ended at `cudaProfilerStop`).
pub const DIAG_CUDA_NOT_ALL_COLLECTED: &str = "Not all CUDA events might have been collected";

/// `META_DATA_CAPTURE` names of per-process settings. nsys 2023.4 and 2025.3 write them as `PROCESS_n:KEY`
/// (`PROCESS_0:COLLECT_CUDA_TRACE`, `PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE`); exports of nsys 2025.6 were
/// queried in public analyses with the bare `CUDA_GRAPH_TRACE_OPTIONS:MODE` and `COLLECT_CPU_TRACE` next to
/// `PROCESS_0:COMMAND`, so both forms are read ([`capture_keys::is`]).
pub mod capture_keys {
    /// `Node` or `Graph`: `--cuda-graph-trace` (absent when the option does not exist in that nsys).
    pub const GRAPH_TRACE_MODE: &str = "CUDA_GRAPH_TRACE_OPTIONS:MODE";
    /// `true`/`false`: `--trace` includes `cuda`.
    pub const COLLECT_CUDA_TRACE: &str = "COLLECT_CUDA_TRACE";
    /// `true`/`false`: `--trace` includes `nvtx`.
    pub const COLLECT_NVTX_TRACE: &str = "COLLECT_NVTX_TRACE";
    /// `true`/`false`: `--trace-fork-before-exec` (a session-wide row, no `PROCESS_n:` prefix in 2025.3).
    pub const TRACE_AFTER_FORK_BEFORE_EXEC: &str = "TRACE_AFTER_FORK_BEFORE_EXEC";

    /// Is the row `name` the setting `key`, bare or as `PROCESS_n:key`?
    pub fn is(name: &str, key: &str) -> bool {
        name == key || name.strip_suffix(key).is_some_and(|head| head.starts_with("PROCESS_") && head.ends_with(':'))
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn per_process_and_bare_keys() {
            assert!(super::is("PROCESS_0:COLLECT_CUDA_TRACE", super::COLLECT_CUDA_TRACE));
            assert!(super::is("PROCESS_12:CUDA_GRAPH_TRACE_OPTIONS:MODE", super::GRAPH_TRACE_MODE));
            assert!(super::is("COLLECT_CUDA_TRACE", super::COLLECT_CUDA_TRACE));
            assert!(super::is("CUDA_GRAPH_TRACE_OPTIONS:MODE", super::GRAPH_TRACE_MODE));
            assert!(!super::is("PROCESS_0:COLLECT_CUDA_TRACE_X", super::COLLECT_CUDA_TRACE));
            assert!(!super::is("XCOLLECT_CUDA_TRACE", super::COLLECT_CUDA_TRACE));
        }
    }
}

/// Runtime API names that launch a CUDA graph (prefixes, matched case-sensitively as nsys writes them, with
/// any version suffix: `cudaGraphLaunch_v10000`, `cuGraphLaunch`).
pub const GRAPH_LAUNCH_PREFIXES: [&str; 2] = ["cudaGraphLaunch", "cuGraphLaunch"];

/// Is this runtime API name a graph launch? The one definition used by every tool.
pub fn is_graph_launch(api: &str) -> bool {
    GRAPH_LAUNCH_PREFIXES.iter().any(|p| api.starts_with(p))
}

/// Runtime API names that begin and end the capture of a CUDA graph from a stream (nsys adds version suffixes:
/// `cudaStreamBeginCapture_v10000`, `cudaStreamBeginCaptureToGraph_v12030`).
pub const STREAM_CAPTURE_BEGIN_PREFIXES: [&str; 2] = ["cudaStreamBeginCapture", "cuStreamBeginCapture"];
pub const STREAM_CAPTURE_END_PREFIXES: [&str; 2] = ["cudaStreamEndCapture", "cuStreamEndCapture"];

/// Is this runtime API name the begin (`Some(true)`) or the end (`Some(false)`) of a stream capture?
pub fn stream_capture_edge(api: &str) -> Option<bool> {
    if STREAM_CAPTURE_BEGIN_PREFIXES.iter().any(|p| api.starts_with(p)) {
        Some(true)
    } else if STREAM_CAPTURE_END_PREFIXES.iter().any(|p| api.starts_with(p)) {
        Some(false)
    } else {
        None
    }
}

/// The largest timestamp magnitude accepted on a timed row: 2^53 ns (about 104 days). nsys timestamps are ns
/// since the session start; a row beyond this is not a real event (it would overflow sums).
pub const MAX_TIMESTAMP_NS: i64 = 1 << 53;
