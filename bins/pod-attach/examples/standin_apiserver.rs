//! A stand-in Kubernetes API server on 127.0.0.1 (the one the tests use, tests/standin), runnable on its own, so
//! the real `pod-attach` binary can be driven by hand or by `scripts/gpu-pod-attach` on a machine without a
//! cluster: its one pod is this machine (exec runs the argv here; port-forward connects to 127.0.0.1:PORT).
//!
//! ```text
//! cargo run -p nsyskit-pod-attach --example standin_apiserver -- --pod vllm-0 --container engine \
//!     --kubeconfig /tmp/standin.kubeconfig
//! KUBECONFIG=/tmp/standin.kubeconfig pod-attach --pod vllm-0 --container engine --image … --strategy session …
//! ```
//!
//! It writes the kubeconfig (a token, an http:// server) and prints `listening on 127.0.0.1:PORT` on stderr;
//! it serves until it is killed (SIGTERM/SIGINT) or its stdin is closed with `--until-stdin-closes`. With
//! `--exec-log FILE` it appends every exec's container and argv (JSON lines) when it ends.

#[path = "../tests/standin/mod.rs"]
mod standin;

use std::io::Read;

use serde_json::json;

fn main() {
    let mut pod_name = "vllm-0".to_string();
    let mut containers = vec![];
    let mut kubeconfig = None;
    let mut until_stdin = false;
    let mut exec_log = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pod" => pod_name = args.next().expect("--pod NAME"),
            "--container" => containers.push(args.next().expect("--container NAME")),
            "--kubeconfig" => kubeconfig = Some(args.next().expect("--kubeconfig PATH")),
            "--exec-log" => exec_log = Some(args.next().expect("--exec-log PATH")),
            "--until-stdin-closes" => until_stdin = true,
            "-h" | "--help" => {
                eprintln!("usage: standin_apiserver [--pod NAME] [--container NAME]... --kubeconfig PATH [--exec-log PATH] [--until-stdin-closes]");
                return;
            }
            other => {
                eprintln!("standin_apiserver: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    let Some(kubeconfig) = kubeconfig else {
        eprintln!("standin_apiserver: --kubeconfig PATH is required");
        std::process::exit(2);
    };
    if containers.is_empty() {
        containers.push("engine".into());
    }
    let names: Vec<&str> = containers.iter().map(String::as_str).collect();
    let si = standin::StandIn::start(
        vec![standin::pod(&pod_name, json!({"app": "vllm"}), &names)],
        standin::PatchMode::Ok,
        standin::TarFault::None,
    );
    std::fs::copy(&si.kubeconfig, &kubeconfig).expect("write the kubeconfig");
    eprintln!(
        "standin_apiserver: listening on 127.0.0.1:{} (pod {pod_name}, containers {names:?}); kubeconfig {kubeconfig}",
        si.port
    );
    // end on SIGINT/SIGTERM (the default action would skip the cleanup of the sidecar's sleep and the exec log)
    if until_stdin {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    } else {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
    }
    if let Some(p) = exec_log {
        let s = si.state.lock().unwrap();
        let lines: String =
            s.execs.iter().map(|(c, a)| json!({"container": c, "argv": a}).to_string() + "\n").collect();
        let http: String =
            s.http.iter().map(|(port, l)| json!({"portforward": port, "line": l}).to_string() + "\n").collect();
        std::fs::write(&p, lines + &http).expect("write the exec log");
    }
    eprintln!("standin_apiserver: stopped");
}
