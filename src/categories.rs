//! Kernel categories: map GPU kernel names to a small, documented vocabulary so that category shares can be
//! joined with other profilers' category breakdowns.
//!
//! The built-in rules are case-insensitive regular expressions tried in order; the first that matches a name
//! wins and a name matching none is `other`:
//!
//! | order | category | pattern |
//! |---|---|---|
//! | 1 | `communication` | `nccl\|all_?reduce\|all_?gather\|reduce_?scatter\|all_?to_?all\|cross_device_reduce` |
//! | 2 | `attention` | `fmha\|flash\|attention` |
//! | 3 | `gemm` | `gemm\|nvjet\|cutlass\|cublas` |
//! | 4 | `norm` | `layer_?norm\|rms_?norm\|group_?norm\|batch_?norm\|instance_?norm\|norm_kernel` |
//! | 5 | `sampling` | `softmax\|top_?k\|top_?p\|argmax\|sampl\|multinomial` |
//! | 6 | `reduce` | `reduce\|reduction` |
//! | 7 | `memcpy` | `memcpy\|memset` |
//! | 8 | `elementwise` | `elementwise\|unrolled\|vectorized\|copy_kernel\|fill\|gather\|scatter\|index` |
//! | — | `other` | anything else |
//!
//! Attention comes before GEMM so that `cutlass` flash-attention kernels count as attention; sampling comes
//! before reduce so that PyTorch's `reduce_kernel<…ArgMaxOps…>` (greedy sampling) counts as sampling.
//!
//! A `--categories FILE` replaces the built-in list entirely (names matching none of its rules are `other`).
//! The file is either JSON — `{"rules": [{"category": "gemm", "pattern": "gemm|nvjet"}, …]}`, a bare array of
//! such objects, or an object `{"gemm": "gemm|nvjet", …}` (in file order) — or text with one
//! `category=regex` per line (blank lines and lines starting with `#` are ignored). Patterns are Rust `regex`
//! syntax matched case-insensitively anywhere in the name.

use std::path::Path;

use regex::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Error, Result};

/// The category of a name that matches no rule.
pub const OTHER: &str = "other";

/// The communication kernels: NCCL's (`ncclDevKernel_AllReduce_Sum_f16_RING_LL`), and the collectives engines
/// run without NCCL — vLLM's and SGLang's custom all-reduce (`vllm::cross_device_reduce_1stage<…>`,
/// `cross_device_reduce_2stage`), TensorRT-LLM's (`oneShotAllReduceKernel`, `twoShotAllReduceKernel`), PyTorch's
/// symmetric-memory ones (`one_shot_all_reduce_kernel`, `multimem_all_reduce_kernel`): tensor parallelism on
/// NVLink GPUs runs its decode all-reduces through these rather than NCCL.
pub const COMMUNICATION_PATTERN: &str = "nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce";

/// The built-in rules, in the order they are tried.
pub const BUILTIN_RULES: &[(&str, &str)] = &[
    ("communication", COMMUNICATION_PATTERN),
    ("attention", "fmha|flash|attention"),
    ("gemm", "gemm|nvjet|cutlass|cublas"),
    ("norm", "layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|norm_kernel"),
    ("sampling", "softmax|top_?k|top_?p|argmax|sampl|multinomial"),
    ("reduce", "reduce|reduction"),
    ("memcpy", "memcpy|memset"),
    ("elementwise", "elementwise|unrolled|vectorized|copy_kernel|fill|gather|scatter|index"),
];

/// Is a kernel name a communication kernel ([`COMMUNICATION_PATTERN`], case-insensitive)? The one
/// definition of step-budget's comm kernels and the built-in `communication` category.
pub fn is_communication_kernel(name: &str) -> bool {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        RegexBuilder::new(COMMUNICATION_PATTERN).case_insensitive(true).build().expect("communication pattern")
    })
    .is_match(name)
}

/// One rule: names matching `pattern` (case-insensitive regex, anywhere in the name) are `category`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CategoryRule {
    pub category: String,
    pub pattern: String,
}

/// An ordered list of compiled rules and where it came from (`builtin` or the file's path).
#[derive(Debug, Clone)]
pub struct Categories {
    source: String,
    rules: Vec<(CategoryRule, Regex)>,
}

/// Time and instances of one kernel name (the input of [`category_shares`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelStat {
    pub name: String,
    pub total_time_ns: i64,
    pub instances: i64,
}

/// One category's share of the kernel time given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CategoryShare {
    pub category: String,
    /// Distinct kernel names in this category.
    pub kernel_names: usize,
    pub instances: i64,
    pub total_time_ns: i64,
    /// `total_time_ns` / the sum over all categories (0 when that sum is 0). A plain sum of kernel durations:
    /// concurrent kernels count fully each, so this is a share of kernel work, not of wall time.
    pub share: f64,
}

impl Categories {
    /// The documented built-in rules.
    pub fn builtin() -> Categories {
        let rules = BUILTIN_RULES
            .iter()
            .map(|(c, p)| CategoryRule { category: c.to_string(), pattern: p.to_string() })
            .collect::<Vec<_>>();
        Categories::from_rules(rules, "builtin").expect("built-in category rules compile")
    }

    /// Compile rules; a bad regex or an empty category is an input error naming `source` and the rule.
    pub fn from_rules(rules: Vec<CategoryRule>, source: &str) -> Result<Categories> {
        let mut out = Vec::with_capacity(rules.len());
        for (i, r) in rules.into_iter().enumerate() {
            if r.category.trim().is_empty() {
                return Err(Error::input(format!("{source}: rule {}: empty category name", i + 1)));
            }
            let re = RegexBuilder::new(&r.pattern).case_insensitive(true).build().map_err(|e| {
                Error::input(format!(
                    "{source}: rule {} ({}): bad regular expression {:?}: {e}",
                    i + 1,
                    r.category,
                    r.pattern
                ))
            })?;
            out.push((r, re));
        }
        if out.is_empty() {
            return Err(Error::input(format!("{source}: no category rules")));
        }
        Ok(Categories { source: source.to_string(), rules: out })
    }

    /// Read a `--categories FILE` (JSON or `category=regex` lines, see the module docs).
    pub fn from_file(path: &Path) -> Result<Categories> {
        let bytes = crate::contract::Input::Path(path.to_path_buf()).read_bytes()?;
        let name = path.display().to_string();
        let text = std::str::from_utf8(&bytes).map_err(|_| Error::input(format!("{name}: not UTF-8 text")))?;
        Categories::parse(text, &name)
    }

    /// Parse rules from text: JSON when it starts with `{` or `[`, else `category=regex` lines.
    pub fn parse(text: &str, source: &str) -> Result<Categories> {
        let trimmed = text.trim_start_matches('\u{feff}').trim_start();
        let rules = if trimmed.starts_with('{') || trimmed.starts_with('[') {
            parse_json_rules(trimmed, source)?
        } else {
            let mut rules = Vec::new();
            for (i, line) in trimmed.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let Some((c, p)) = line.split_once('=') else {
                    return Err(Error::input(format!(
                        "{source}: line {}: expected `category=regex`, got {line:?}",
                        i + 1
                    )));
                };
                let (c, p) = (c.trim(), p.trim());
                if c.is_empty() || p.is_empty() {
                    return Err(Error::input(format!(
                        "{source}: line {}: empty category or pattern in {line:?}",
                        i + 1
                    )));
                }
                rules.push(CategoryRule { category: c.to_string(), pattern: p.to_string() });
            }
            rules
        };
        Categories::from_rules(rules, source)
    }

    /// `builtin` or the path of the file the rules came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The rules, in the order they are tried.
    pub fn rules(&self) -> Vec<CategoryRule> {
        self.rules.iter().map(|(r, _)| r.clone()).collect()
    }

    /// The category of a kernel name: the first matching rule's, else `other`.
    pub fn categorize(&self, name: &str) -> &str {
        self.rules.iter().find(|(_, re)| re.is_match(name)).map(|(r, _)| r.category.as_str()).unwrap_or(OTHER)
    }
}

fn parse_json_rules(text: &str, source: &str) -> Result<Vec<CategoryRule>> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Error::input(format!("{source}: line {} column {}: not valid JSON: {e}", e.line(), e.column())))?;
    let list = match &v {
        serde_json::Value::Array(a) => a.clone(),
        serde_json::Value::Object(o) if o.contains_key("rules") => match &o["rules"] {
            serde_json::Value::Array(a) => a.clone(),
            _ => return Err(Error::input(format!("{source}: $.rules: expected an array of {{category, pattern}}"))),
        },
        serde_json::Value::Object(o) => {
            let mut rules = Vec::new();
            for (k, p) in o {
                let Some(p) = p.as_str() else {
                    return Err(Error::input(format!("{source}: $.{k}: expected a regular expression string")));
                };
                rules.push(CategoryRule { category: k.clone(), pattern: p.to_string() });
            }
            return Ok(rules);
        }
        _ => return Err(Error::input(format!("{source}: $: expected an object or an array of rules"))),
    };
    list.into_iter()
        .enumerate()
        .map(|(i, r)| {
            serde_json::from_value::<CategoryRule>(r)
                .map_err(|e| Error::input(format!("{source}: rules[{i}]: expected {{\"category\", \"pattern\"}}: {e}")))
        })
        .collect()
}

/// Category shares of the given kernels, sorted by time descending, then category name.
pub fn category_shares(categories: &Categories, kernels: &[KernelStat]) -> Vec<CategoryShare> {
    let mut by: std::collections::BTreeMap<String, (usize, i64, i64)> = Default::default();
    for k in kernels {
        let e = by.entry(categories.categorize(&k.name).to_string()).or_default();
        e.0 += 1;
        e.1 += k.instances;
        e.2 += k.total_time_ns;
    }
    let total: i64 = by.values().map(|e| e.2).sum();
    let mut out: Vec<CategoryShare> = by
        .into_iter()
        .map(|(category, (n, inst, t))| CategoryShare {
            category,
            kernel_names: n,
            instances: inst,
            total_time_ns: t,
            share: if total > 0 { t as f64 / total as f64 } else { 0.0 },
        })
        .collect();
    out.sort_by(|a, b| b.total_time_ns.cmp(&a.total_time_ns).then_with(|| a.category.cmp(&b.category)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_rules_on_real_kernel_names() {
        let c = Categories::builtin();
        assert_eq!(c.categorize("nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_NNT"), "gemm");
        assert_eq!(
            c.categorize("void at::native::<unnamed>::vectorized_layer_norm_kernel<c10::Half, float, (bool)0>(int)"),
            "norm"
        );
        assert_eq!(c.categorize("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<c10::Half, at::native::ArgMaxOps<float>>>(T3)"), "sampling");
        assert_eq!(c.categorize("void at::native::reduce_kernel<(int)512, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor>>>(T3)"), "reduce");
        assert_eq!(c.categorize("void <unnamed>::softmax_warp_forward<float, float, float, (int)9>(T2 *)"), "sampling");
        assert_eq!(c.categorize("void at::native::vectorized_elementwise_kernel<(int)8, at::native::CUDAFunctor_add<c10::Half>>(int, T2, T3)"), "elementwise");
        for name in [
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, (int)2>(vllm::RankData *, vllm::RankSignals, vllm::Signal *, __nv_bfloat16 *, int, int)",
            "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16>(T1)",
            "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, (int)8>(T1 **, T1 *, T1 *, unsigned long, unsigned long, unsigned int **)",
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096>)",
        ] {
            assert_eq!(c.categorize(name), "communication", "{name}");
            assert!(is_communication_kernel(name), "{name}");
        }
        // NCCL's one-rank local reduction (world size 1, measured in held-out `nccl`) exchanges nothing
        assert!(!is_communication_kernel(
            "void <unnamed>::oneRankReduce<FuncPreMulSum<__half>>(void *, void *, unsigned long, unsigned long, bool)"
        ));
        assert!(!is_communication_kernel("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>>>(T3)"));
        assert!(!is_communication_kernel("void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, long, long, bool)"));
        assert_eq!(
            c.categorize("ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevKernelArgsStorage<4096>)"),
            "communication"
        );
        assert_eq!(c.categorize("cutlass_flash_fwd_kernel"), "attention");
        assert_eq!(c.categorize("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>"), "attention");
        assert_eq!(c.categorize("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_nn"), "gemm");
        assert_eq!(c.categorize("[CUDA memcpy Device-to-Host]"), "memcpy");
        assert_eq!(c.categorize("my_custom_kernel"), "other");
    }

    #[test]
    fn override_files_json_and_lines() {
        let c = Categories::parse("# mine\nmatmul = nvjet|gemm\n\nnorm=layer_norm\n", "cats.txt").unwrap();
        assert_eq!(c.categorize("NVJET_x"), "matmul");
        assert_eq!(c.categorize("softmax"), "other");
        let c = Categories::parse(r#"{"rules":[{"category":"gemm","pattern":"nvjet"}]}"#, "c.json").unwrap();
        assert_eq!(c.categorize("nvjet_sm90"), "gemm");
        let c = Categories::parse(r#"{"b":"x","a":"y"}"#, "c.json").unwrap();
        assert_eq!(c.rules()[0].category, "b");
        let e = Categories::parse("gemm=(", "bad.txt").unwrap_err();
        assert!(e.message.starts_with("bad.txt: rule 1 (gemm): bad regular expression"), "{}", e.message);
        let e = Categories::parse("gemm nvjet", "bad.txt").unwrap_err();
        assert!(e.message.starts_with("bad.txt: line 1:"), "{}", e.message);
        let e = Categories::parse(r#"{"rules": 3}"#, "c.json").unwrap_err();
        assert!(e.message.contains("$.rules"), "{}", e.message);
    }

    #[test]
    fn shares_sum_to_one() {
        let k = |n: &str, t| KernelStat { name: n.into(), total_time_ns: t, instances: 1 };
        let s = category_shares(&Categories::builtin(), &[k("nvjet_a", 300), k("nvjet_b", 100), k("foo", 100)]);
        assert_eq!(s[0].category, "gemm");
        assert_eq!(s[0].total_time_ns, 400);
        assert_eq!(s[0].kernel_names, 2);
        assert!((s.iter().map(|c| c.share).sum::<f64>() - 1.0).abs() < 1e-12);
    }
}
