//! `pod-attach`: capture from a live Kubernetes pod (docs/pod-attach.md). The whole run is
//! `nsyskit_pod_attach::run_tool`, shared with the Nushell command; this binary adds its signals.

use clap::Parser;
use nsyskit::contract::cli::{main_with, report_error};
use nsyskit::tools::Invocation;
use nsyskit_pod_attach::{run_tool, Ended};

use nsyskit::flags::pod_attach::PodAttachArgs as Args;

fn main() {
    main_with("pod-attach", || {
        let a = Args::parse();
        // SIGINT, SIGTERM and SIGHUP all stop the run and run the same cleanup
        let signals = async {
            use tokio::signal::unix::{signal, SignalKind};
            match (signal(SignalKind::terminate()), signal(SignalKind::hangup())) {
                (Ok(mut term), Ok(mut hup)) => tokio::select! {
                    _ = tokio::signal::ctrl_c() => "SIGINT".to_string(),
                    _ = term.recv() => "SIGTERM".to_string(),
                    _ = hup.recv() => "SIGHUP".to_string(),
                },
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                    "SIGINT".to_string()
                }
            }
        };
        match run_tool(a, &Invocation::process(), signals) {
            Ok(Ended::Done(outcome)) => nsyskit::tools::print("pod-attach", outcome),
            Err(e) | Ok(Ended::Failed(e, _)) => report_error("pod-attach", &e),
            Ok(Ended::Interrupted(why, _)) => {
                eprintln!("pod-attach: error: interrupted by {why} before the capture was copied out");
                match why.as_str() {
                    "SIGTERM" => 143,
                    "SIGHUP" => 129,
                    _ => 130,
                }
            }
        }
    })
}
