//! The `nsys stats` reports this tool knows: names, older names, headers, and the columns that are text,
//! floats, time points or counts.

/// Reports that get `totals` and `top_kernels`.
pub const KERNEL_REPORTS: &[&str] = &["cuda_gpu_kern_sum"];

/// A supported report: canonical name, older names, header (time columns written `Label (T)`).
pub struct ReportDef {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub header: &'static [&'static str],
}

/// Every report kern-csv-to-json understands (the header columns of nsys 2023.4 and 2025.3, which agree).
pub const REPORTS: &[ReportDef] = &[
    ReportDef {
        name: "cuda_gpu_kern_sum",
        aliases: &["gpukernsum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Instances",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Name",
        ],
    },
    ReportDef {
        name: "cuda_api_sum",
        aliases: &["cudaapisum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Num Calls",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Name",
        ],
    },
    ReportDef {
        name: "osrt_sum",
        aliases: &["osrtsum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Num Calls",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Name",
        ],
    },
    ReportDef {
        name: "nvtx_sum",
        aliases: &["nvtxsum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Instances",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Style",
            "Range",
        ],
    },
    ReportDef {
        name: "nvtx_pushpop_sum",
        aliases: &["nvtxppsum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Instances",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Range",
        ],
    },
    ReportDef {
        name: "nvtx_startend_sum",
        aliases: &["nvtxsesum", "nvtxsssum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Instances",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Range",
        ],
    },
    ReportDef {
        name: "nvtx_kern_sum",
        aliases: &["nvtxkernsum"],
        header: &[
            "NVTX Range",
            "Style",
            "PID",
            "TID",
            "NVTX Inst",
            "Kern Inst",
            "Total Time (T)",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Kernel Name",
        ],
    },
    ReportDef {
        name: "nvtx_gpu_proj_sum",
        aliases: &[],
        header: &[
            "Range",
            "Style",
            "Total Proj Time (T)",
            "Total Range Time (T)",
            "Range Instances",
            "Proj Avg (T)",
            "Proj Med (T)",
            "Proj Min (T)",
            "Proj Max (T)",
            "Proj StdDev (T)",
            "Total GPU Ops",
            "Avg GPU Ops",
            "Avg Range Lvl",
            "Avg Num Child",
        ],
    },
    ReportDef {
        name: "cuda_gpu_mem_time_sum",
        aliases: &["gpumemtimesum"],
        header: &[
            "Time (%)",
            "Total Time (T)",
            "Count",
            "Avg (T)",
            "Med (T)",
            "Min (T)",
            "Max (T)",
            "StdDev (T)",
            "Operation",
        ],
    },
    ReportDef {
        name: "cuda_gpu_mem_size_sum",
        aliases: &["gpumemsizesum"],
        header: &["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation"],
    },
    ReportDef {
        name: "cuda_kern_exec_sum",
        aliases: &["kernexecsum"],
        header: &[
            "PID",
            "TID",
            "DevId",
            "Count",
            "QCount",
            "TAvg (T)",
            "TMed (T)",
            "TMin (T)",
            "TMax (T)",
            "TStdDev (T)",
            "AAvg (T)",
            "AMed (T)",
            "AMin (T)",
            "AMax (T)",
            "AStdDev (T)",
            "QAvg (T)",
            "QMed (T)",
            "QMin (T)",
            "QMax (T)",
            "QStdDev (T)",
            "KAvg (T)",
            "KMed (T)",
            "KMin (T)",
            "KMax (T)",
            "KStdDev (T)",
            "API Name",
            "Kernel Name",
        ],
    },
    ReportDef {
        name: "cuda_api_trace",
        aliases: &["cudaapitrace"],
        header: &["Start (T)", "Duration (T)", "Name", "Result", "CorrID", "Pid", "Tid", "T-Pri", "Thread Name"],
    },
    ReportDef {
        name: "cuda_gpu_trace",
        aliases: &["gputrace"],
        header: &[
            "Start (T)",
            "Duration (T)",
            "CorrId",
            "GrdX",
            "GrdY",
            "GrdZ",
            "BlkX",
            "BlkY",
            "BlkZ",
            "Reg/Trd",
            "StcSMem (MB)",
            "DymSMem (MB)",
            "Bytes (MB)",
            "Throughput (MB/s)",
            "SrcMemKd",
            "DstMemKd",
            "Device",
            "Ctx",
            "GreenCtx",
            "Strm",
            "Name",
        ],
    },
    ReportDef {
        name: "nvtx_pushpop_trace",
        aliases: &["nvtxpptrace"],
        header: &[
            "Start (T)",
            "End (T)",
            "Duration (T)",
            "DurChild (T)",
            "DurNonChild (T)",
            "Name",
            "PID",
            "TID",
            "Lvl",
            "NumChild",
            "RangeId",
            "ParentId",
            "RangeStack",
            "NameTree",
        ],
    },
];

pub(super) const TEXT_COLUMNS: &[&str] = &[
    "Name",
    "Range",
    "Style",
    "Operation",
    "API Name",
    "Kernel Name",
    "NVTX Range",
    "RangeStack",
    "NameTree",
    "Thread Name",
    "SrcMemKd",
    "DstMemKd",
    "Device",
];
pub(super) const FLOAT_COLUMNS: &[&str] = &["Avg GPU Ops", "Avg Range Lvl", "Avg Num Child"];
/// Time columns that are points in time, not durations (every other time column must not be negative).
pub(super) const TIME_POINT_COLUMNS: &[&str] = &["Start", "End"];
/// Integer columns that count something (a negative value is refused).
pub(super) const COUNT_COLUMNS: &[&str] = &[
    "Instances",
    "Num Calls",
    "Count",
    "QCount",
    "NVTX Inst",
    "Kern Inst",
    "Range Instances",
    "Total GPU Ops",
    "Lvl",
    "NumChild",
];

/// Look a report up by its current or older name.
pub fn find_report(name: &str) -> Option<&'static ReportDef> {
    REPORTS.iter().find(|r| r.name == name || r.aliases.contains(&name))
}

/// Every report name accepted by `--report` (current names, then older ones).
pub fn report_names() -> Vec<&'static str> {
    let mut v: Vec<&str> = REPORTS.iter().map(|r| r.name).collect();
    v.extend(REPORTS.iter().flat_map(|r| r.aliases.iter().copied()));
    v
}
