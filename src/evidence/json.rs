//! Evidence from JSON: an evidence bundle (its `kernel_profile`, `provenance`, `serve_capture`, … blocks read
//! tolerantly: an absent field is unknown) or a bare ranges document.

use super::*;

/// Evidence from a JSON document: an evidence bundle, or a bare ranges document.
pub fn from_json(v: &Value, name: &str) -> Result<Evidence> {
    let mut ev = from_json_view(v, name)?;
    if ev.kind == "bundle" {
        ev.bundle = Some(v.clone());
    }
    Ok(ev)
}

/// [`from_json`] keeping the document itself as [`Evidence::bundle`], not a copy of it (the copy doubled the
/// memory a bundle takes).
pub(super) fn from_json_owned(v: Value, name: &str) -> Result<Evidence> {
    let mut ev = from_json_view(&v, name)?;
    if ev.kind == "bundle" {
        ev.bundle = Some(v);
    }
    Ok(ev)
}

/// [`from_json`] without [`Evidence::bundle`].
pub(super) fn from_json_view(v: &Value, name: &str) -> Result<Evidence> {
    let Some(obj) = v.as_object() else {
        return Err(Error::input(format!("{name}: $: expected a JSON object (an evidence bundle)")));
    };
    let mut ev = Evidence { source: name.to_string(), ..Default::default() };
    let schema = obj.get("schema").and_then(|s| s.as_str()).unwrap_or("");
    if schema == "nsyskit.ranges/v1" {
        ev.kind = "ranges".into();
        ev.ranges = Some(ranges_view(v, &format!("{name}: $"))?);
        ev.capture = capture_of(v, &format!("{name}: $.source.capture"))?;
        return Ok(ev);
    }
    let kp = obj.get("kernel_profile");
    if kp.is_none() && !obj.contains_key("provenance") {
        return Err(Error::input(format!(
            "{name}: $: not an evidence bundle (no kernel_profile or provenance block{})",
            if schema.is_empty() { String::new() } else { format!("; schema {schema}") }
        )));
    }
    ev.kind = "bundle".into();
    check_block_types(obj, name)?;
    let kp = kp.filter(|k| !k.is_null());
    if let Some(kp) = kp {
        if let Some(r) = kp.get("ranges").filter(|r| !r.is_null()) {
            // one ranges document, or a list of them (the first is used)
            let (r, at) = match r {
                Value::Array(a) if !a.is_empty() => (&a[0], "$.kernel_profile.ranges[0]"),
                _ => (r, "$.kernel_profile.ranges"),
            };
            ev.ranges = Some(ranges_view(r, &format!("{name}: {at}"))?);
            ev.capture = capture_of(r, &format!("{name}: {at}.source.capture"))?;
        }
        if let Some(tk) = kp.get("top_kernels").filter(|t| !t.is_null()) {
            let Some(list) = tk.as_array() else {
                return Err(Error::input(format!("{name}: $.kernel_profile.top_kernels: expected an array")));
            };
            ev.kernels = Some(kernel_stats(list, &format!("{name}: $.kernel_profile.top_kernels"))?);
            ev.kernels_source = Some("kernel_profile.top_kernels".into());
        }
        // the full kernel table kern-csv-to-json keeps at kernel_profile.stats.<report>.rows (top_kernels may be
        // cut by --top): preferred, so that shares never come from a truncated list; every cell is checked
        for report in crate::kern_csv_to_json::KERNEL_REPORTS {
            let Some(rows) = kp.get("stats").and_then(|s| s.get(*report)).and_then(|d| d.get("rows")) else {
                continue;
            };
            let at = format!("{name}: $.kernel_profile.stats.{report}.rows");
            let Some(rows) = rows.as_array() else {
                return Err(Error::input(format!("{at}: expected an array, got {}", json_kind(rows))));
            };
            let ks = kernel_stats(rows, &at)?;
            if !ks.is_empty() {
                ev.kernels = Some(ks);
                ev.kernels_source = Some(format!("kernel_profile.stats.{report}.rows"));
                break;
            }
        }
        // the totals of the whole kernel table: the denominator of every share
        let totals = kp
            .get("totals")
            .filter(|t| t.is_object())
            .map(|t| (t, "kernel_profile.totals".to_string(), "kernel_profile.totals"))
            .or_else(|| {
                crate::kern_csv_to_json::KERNEL_REPORTS.iter().find_map(|r| {
                    kp.get("stats")
                        .and_then(|s| s.get(*r))
                        .and_then(|d| d.get("totals"))
                        .filter(|t| t.is_object())
                        .map(|t| (t, format!("kernel_profile.stats.{r}.totals"), "kernel_profile.stats totals"))
                })
            });
        if let Some((t, path, at)) = totals {
            let n = |k: &str| cell_count(t, k, &format!("{name}: $.{path}"));
            if let Some(total) = n("total_time_ns")? {
                ev.kernel_totals = Some(BundleKernelTotals {
                    total_time_ns: total,
                    kernels: n("kernels")?,
                    instances: n("instances")?,
                    source: at.into(),
                });
            }
        }
    }
    if let Some(kp) = kp {
        apply_bundle_documents(&mut ev, kp);
    }
    // the gate verdict of a pod-attach or serve-capture run, where kernel_profile carries none (pod-attach
    // --bundle keeps gate-check's document at pod_attach.gate.document)
    if ev.gates.is_none() {
        if let Some(g) = v.pointer("/pod_attach/gate").filter(|g| g.is_object()) {
            ev.gates = g
                .get("document")
                .and_then(|d| EvidenceGates::of_doc(d, "pod_attach.gate.document"))
                .or_else(|| EvidenceGates::of_doc(g, "pod_attach.gate"));
        } else if let Some(g) = v.pointer("/serve_capture/gate").filter(|g| g.is_object()) {
            ev.gates = EvidenceGates::of_doc(g, "serve_capture.gate").map(|mut s| {
                if s.reasons.is_empty() {
                    s.reasons = g
                        .get("reasons")
                        .and_then(|r| r.as_array())
                        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                        .unwrap_or_default();
                }
                s
            });
        }
    }
    if let Some(p) = obj.get("provenance").filter(|p| p.is_object()) {
        apply_provenance(&mut ev.facts, p, "provenance");
        ev.provenance = Some(p.clone());
    }
    Ok(ev)
}

/// The blocks nsyskit places in a bundle (bundle-merge's placement table) must have their type: a string
/// where `kernel_profile` belongs is an input error naming the JSON path, not an empty bundle. Null counts as
/// absent.
pub(super) fn check_block_types(obj: &serde_json::Map<String, Value>, name: &str) -> Result<()> {
    fn type_name(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
    let want_object = |v: Option<&Value>, path: &str| -> Result<()> {
        match v {
            None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
            Some(v) => Err(Error::input(format!("{name}: {path}: expected an object, found {}", type_name(v)))),
        }
    };
    for k in ["kernel_profile", "provenance", "report", "comparisons", "serve_capture", "pod_attach"] {
        want_object(obj.get(k), &format!("$.{k}"))?;
    }
    let Some(kp) = obj.get("kernel_profile").and_then(|k| k.as_object()) else { return Ok(()) };
    for k in ["gates", "readiness", "stats", "totals"] {
        want_object(kp.get(k), &format!("$.kernel_profile.{k}"))?;
    }
    match kp.get("ranges") {
        None | Some(Value::Null) | Some(Value::Object(_)) | Some(Value::Array(_)) => {}
        Some(v) => {
            return Err(Error::input(format!(
                "{name}: $.kernel_profile.ranges: expected an object (a ranges document) or an array of them, found {}",
                type_name(v)
            )))
        }
    }
    match kp.get("top_kernels") {
        None | Some(Value::Null) | Some(Value::Array(_)) => {}
        Some(v) => {
            return Err(Error::input(format!(
                "{name}: $.kernel_profile.top_kernels: expected an array, found {}",
                type_name(v)
            )))
        }
    }
    Ok(())
}

pub(super) fn ranges_view(v: &Value, at: &str) -> Result<RangesView> {
    if !v.get("ranges").map(|r| r.is_array()).unwrap_or(false) {
        return Err(Error::input(format!("{at}: expected an nsyskit.ranges/v1 document with a ranges array")));
    }
    serde_json::from_value::<RangesView>(v.clone())
        .map_err(|e| Error::input(format!("{at}: not a ranges document: {e}")))
}

/// The JSON type of a value, for messages (`a string "6009202"`, `null`).
pub(super) fn json_kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{:?}", s.chars().take(60).collect::<String>()),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// A count or a duration in ns read from a bundle: a JSON integer in 0..=i64::MAX (no string, float, null,
/// boolean or negative number), else an input error naming `at`.
pub(super) fn count_at(v: &Value, at: &str) -> Result<i64> {
    match v.as_u64() {
        Some(n) if n <= i64::MAX as u64 => Ok(n as i64),
        _ => Err(Error::input(format!("{at}: expected a non-negative integer, got {}", json_kind(v)))),
    }
}

/// The cell `key` of object `obj` (at `at`) as [`count_at`]; `None` when it is absent.
pub(super) fn cell_count(obj: &Value, key: &str, at: &str) -> Result<Option<i64>> {
    obj.get(key).map(|v| count_at(v, &format!("{at}.{key}"))).transpose()
}

/// One kernel row of a bundle (`top_kernels[i]` or `stats.<report>.rows[i]`, at `at`): `name` a string, the
/// total time (`total_time_ns` or its CSV aliases) and `instances` (absent = 0) non-negative integers.
pub(super) fn kernel_stat(k: &Value, at: &str) -> Result<KernelStat> {
    if !k.is_object() {
        return Err(Error::input(format!("{at}: expected a kernel row object, got {}", json_kind(k))));
    }
    let name = match k.get("name").map(|n| ("name", n)).or_else(|| k.get("Name").map(|n| ("Name", n))) {
        Some((_, Value::String(s))) => s.clone(),
        Some((key, v)) => return Err(Error::input(format!("{at}.{key}: expected a string, got {}", json_kind(v)))),
        None => return Err(Error::input(format!("{at}: expected {{name, total_time_ns, instances}}: no name"))),
    };
    let first = |keys: &[&'static str]| keys.iter().find_map(|key| k.get(*key).map(|v| (*key, v)));
    let total = match first(&["total_time_ns", "total_ns", "time_total_ns", "total_time", "Total Time (ns)"]) {
        Some((key, v)) => count_at(v, &format!("{at}.{key}"))?,
        None => {
            return Err(Error::input(format!("{at}: expected {{name, total_time_ns, instances}}: no total_time_ns")))
        }
    };
    let instances = match first(&["instances", "Instances", "count"]) {
        Some((key, v)) => count_at(v, &format!("{at}.{key}"))?,
        None => 0,
    };
    Ok(KernelStat { name, total_time_ns: total, instances })
}

/// The kernel rows of a list at `at`, each checked ([`kernel_stat`]); their total time and instances must also
/// sum within i64 (a category total is such a sum).
pub(super) fn kernel_stats(rows: &[Value], at: &str) -> Result<Vec<KernelStat>> {
    let ks = rows.iter().enumerate().map(|(i, k)| kernel_stat(k, &format!("{at}[{i}]"))).collect::<Result<Vec<_>>>()?;
    for (what, f) in [
        ("total_time_ns", (|k: &KernelStat| k.total_time_ns) as fn(&KernelStat) -> i64),
        ("instances", |k| k.instances),
    ] {
        if ks.iter().try_fold(0i64, |a, k| a.checked_add(f(k))).is_none() {
            return Err(Error::input(format!(
                "{at}: the rows' {what} sum past {} (no real capture has that much)",
                i64::MAX
            )));
        }
    }
    Ok(ks)
}

/// The capture header a ranges document carries at `source.capture` (`at` names it), every field type-checked:
/// strings or null, `gpus` an array of strings, durations and bounds integers (the duration non-negative).
pub(super) fn capture_of(doc: &Value, at: &str) -> Result<Option<crate::export::CaptureInfo>> {
    let Some(c) = doc.pointer("/source/capture").filter(|c| !c.is_null()) else { return Ok(None) };
    let Some(obj) = c.as_object() else {
        return Err(Error::input(format!("{at}: expected an object, got {}", json_kind(c))));
    };
    for (k, v) in obj {
        let ok = match k.as_str() {
            "captured_at" | "captured_at_from" | "driver_version" | "cuda_driver_version" => {
                v.is_null() || v.is_string()
            }
            "gpus" => v.as_array().is_some_and(|a| a.iter().all(|g| g.is_string())),
            "start_ns" | "stop_ns" => v.is_null() || v.is_i64(),
            "duration_ns" => v.is_null() || v.as_i64().is_some_and(|d| d >= 0),
            _ => true,
        };
        if !ok {
            let want = match k.as_str() {
                "gpus" => "an array of strings",
                "start_ns" | "stop_ns" => "an integer or null",
                "duration_ns" => "a non-negative integer or null",
                _ => "a string or null",
            };
            return Err(Error::input(format!("{at}.{k}: expected {want}, got {}", json_kind(v))));
        }
    }
    let mut c = c.clone();
    if let Some(o) = c.as_object_mut() {
        o.entry("gpus").or_insert_with(|| Value::Array(vec![]));
    }
    serde_json::from_value(c).map(Some).map_err(|e| Error::input(format!("{at}: {e}")))
}

/// Facts the bundle's own documents record: the nsys version (ranges or gate `source.nsys_version`), the
/// ranges window, and from gate G1 (`node-level-graph-tracing`) the graph-trace level and graph evidence.
pub(super) fn apply_bundle_documents(ev: &mut Evidence, kp: &Value) {
    let f = &mut ev.facts;
    for (path, doc) in [("kernel_profile.ranges", kp.get("ranges")), ("kernel_profile.gates", kp.get("gates"))] {
        if let Some(v) = doc.and_then(|d| d.pointer("/source/nsys_version")).and_then(|v| v.as_str()) {
            if !f.nsys_version.is_known() {
                f.nsys_version = Fact::known(
                    Value::String(normalize_version(v)),
                    format!("{path}.source.nsys_version (the nsys that exported it)"),
                );
            }
        }
    }
    if let Some(w) = kp.pointer("/ranges/source/window") {
        let w = if w.is_null() { Value::String("whole capture".into()) } else { w.clone() };
        f.window = Fact::known(w, "kernel_profile.ranges.source.window (sqlite-ranges --window; null = whole capture)");
    }
    let Some(g) = kp.get("gates").filter(|g| g.is_object()) else {
        // no gate-check document: the gates step-budget ran on the export it budgeted, when it recorded them
        if let Some(g) = kp.pointer("/step_budget/gates").filter(|g| g.is_object()) {
            ev.gates = serde_json::from_value::<EvidenceGates>(g.clone())
                .ok()
                .filter(|x| !x.verdict.is_empty())
                .map(|x| EvidenceGates { source: "kernel_profile.step_budget.gates".into(), ..x });
        }
        return;
    };
    ev.gates = EvidenceGates::of_doc(g, "kernel_profile.gates");
    let Some(g1) = g
        .get("gates")
        .and_then(|l| l.as_array())
        .and_then(|l| l.iter().find(|x| x.get("id").and_then(|i| i.as_str()) == Some("G1")))
    else {
        return;
    };
    let mut text = g1.get("reason").and_then(|r| r.as_str()).unwrap_or("").to_string();
    for e in g1.get("evidence").and_then(|e| e.as_array()).into_iter().flatten() {
        text.push('\n');
        text.push_str(e.as_str().unwrap_or(""));
    }
    let level = regex::Regex::new(r"--cuda-graph-trace=(node|graph)").expect("regex");
    if let Some(c) = level.captures(&text) {
        f.graph_trace_level = Fact::known(Value::String(c[1].to_string()), "kernel_profile.gates G1 reason");
    }
    let num = |re: &str| regex::Regex::new(re).expect("regex").captures(&text).and_then(|c| c[1].parse::<i64>().ok());
    if let (Some(launches), Some(node_rows), Some(trace_rows)) =
        (num(r"cudaGraphLaunch calls (\d+)"), num(r"rows with graphNodeId (\d+)"), num(r"GRAPH_TRACE rows (\d+)"))
    {
        let uses = launches > 0 || node_rows > 0 || trace_rows > 0;
        f.cuda_graphs = Fact::known(
            Value::String(if uses { "graphs" } else { "eager" }.into()),
            "kernel_profile.gates G1 evidence (graph launches, graphNodeId rows, GRAPH_TRACE rows)",
        );
        f.graph_evidence = Some(GraphEvidence {
            graph_launch_calls: launches,
            kernels_with_graph_node: node_rows,
            graph_trace_rows: trace_rows,
            kernels: 0,
        });
    }
}

/// Look up the first present path (dotted) in a JSON value.
pub(super) fn lookup<'a>(v: &'a Value, paths: &[&'a str]) -> Option<(&'a str, &'a Value)> {
    for p in paths {
        let mut cur = v;
        let mut ok = true;
        for part in p.split('.') {
            match cur.get(part) {
                Some(x) => cur = x,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && !cur.is_null() {
            return Some((p, cur));
        }
    }
    None
}
