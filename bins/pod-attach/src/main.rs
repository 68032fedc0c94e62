use clap::Parser;
use nsyskit::contract::cli::{emit, main_with, report_error};
use nsyskit::pod_attach as pa;
use nsyskit_pod_attach::{connect_and_run, options, runtime, Gate, Outcome};

use nsyskit::flags::pod_attach::PodAttachArgs as Args;

fn main() {
    main_with("pod-attach", || {
        let a = Args::parse();
        let style = a.out.style();
        let o = match options(&a.flags()) {
            Ok(o) => o,
            Err(e) => return report_error("pod-attach", &e),
        };
        if a.dry_run {
            return emit("pod-attach", pa::dry_run(&o), style);
        }
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => return report_error("pod-attach", &e),
        };
        let gate = match &a.gate_check {
            Some(p) => Gate::Program(p.clone()),
            None => Gate::Library,
        };
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
        match rt.block_on(async { connect_and_run(None, &o, &gate, signals).await }) {
            Err(e) => report_error("pod-attach", &e),
            Ok(Outcome::Done(doc)) => emit("pod-attach", Ok(*doc), style),
            Ok(Outcome::Failed(e, _)) => report_error("pod-attach", &e),
            Ok(Outcome::Interrupted(why, _)) => {
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
