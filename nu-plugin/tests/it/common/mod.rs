//! A real Nushell 0.115.1 with the plugin registered in a temporary config folder.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const DEFAULT_NU: &str = "/tmp/setup/nu/node_modules/@nushell/linux-x64/bin/nu";

/// The workspace root (fixtures live there).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub struct Nu {
    pub bin: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Nu {
    /// The real nu (`NSYSKIT_NU`, else the local default), or None with a SKIP message when absent.
    pub fn or_skip(test: &str) -> Option<Nu> {
        let bin = std::env::var_os("NSYSKIT_NU").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_NU));
        if !bin.is_file() {
            skip(&format!(
                "SKIP {test}: no nu binary at {} (set NSYSKIT_NU; scripts/test installs nushell@0.115.1)",
                bin.display()
            ));
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.nu"), "$env.config.show_banner = false\n").unwrap();
        std::fs::write(dir.path().join("env.nu"), "").unwrap();
        let nu = Nu { bin, dir };
        let version = nu.raw("version | get version");
        assert!(version.status.success(), "nu version: {}", String::from_utf8_lossy(&version.stderr));
        let v = String::from_utf8_lossy(&version.stdout).trim().to_string();
        assert!(v.starts_with("0.115."), "the plugin is built for nu 0.115.x, {} is {v}", nu.bin.display());
        let plugin = env!("CARGO_BIN_EXE_nu_plugin_nsyskit");
        let add = nu.raw(&format!("plugin add '{plugin}'"));
        assert!(add.status.success(), "plugin add failed: {}", String::from_utf8_lossy(&add.stderr));
        Some(nu)
    }

    pub fn plugin_config(&self) -> PathBuf {
        self.dir.path().join("plugins.msgpackz")
    }

    /// `nu -c SCRIPT` in the workspace root with the temporary config and plugin registry, not started.
    pub fn command(&self, script: &str) -> Command {
        let mut c = Command::new(&self.bin);
        c.current_dir(root())
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path())
            .env_remove("NU_LIB_DIRS")
            .arg("--config")
            .arg(self.dir.path().join("config.nu"))
            .arg("--env-config")
            .arg(self.dir.path().join("env.nu"))
            .arg("--plugin-config")
            .arg(self.plugin_config())
            .arg("--no-history")
            .arg("--error-style")
            .arg("plain")
            .arg("-c")
            .arg(script);
        c
    }

    /// One `nu -c SCRIPT` in the workspace root with the temporary config and plugin registry.
    pub fn raw(&self, script: &str) -> Output {
        self.command(script).output().expect("run nu")
    }

    /// `plugin use nsyskit` then the pipeline, its value as JSON (`to json` in nu, parsed here).
    pub fn json(&self, pipeline: &str) -> serde_json::Value {
        let out = self.raw(&format!("plugin use nsyskit\n{pipeline} | to json --raw"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "nu failed on `{pipeline}`:\n{stderr}");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("`{pipeline}` did not give JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
        })
    }

    /// `plugin use nsyskit` then a pipeline that must fail: its stderr.
    pub fn error(&self, pipeline: &str) -> String {
        let out = self.raw(&format!("plugin use nsyskit\n{pipeline}"));
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "`{pipeline}` should fail, gave {}", String::from_utf8_lossy(&out.stdout));
        stderr
    }
}

/// nsys 2023.4 (`NSYS_BIN`, else where scripts/get-nsys installs it), or None with a SKIP message.
pub fn nsys_or_skip(test: &str) -> Option<PathBuf> {
    let nsys = std::env::var_os("NSYS_BIN").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(&std::env::var("HOME").unwrap_or_default()).join(".cache/nsyskit/nsys-2023.4/usr/bin/nsys")
    });
    if nsys.is_file() {
        Some(nsys)
    } else {
        skip(&format!(
            "SKIP {test}: no nsys at {} (set NSYS_BIN; scripts/get-nsys installs nsys 2023.4)",
            nsys.display()
        ));
        None
    }
}

/// The CPU test server with NVTX ranges (scripts/cpu/vibeserve_http.c), compiled with gcc and the NVTX v3
/// headers shipped with nsys into `dir`; None with a SKIP message when gcc or the headers are absent.
pub fn cpu_server_or_skip(test: &str, nsys: &Path, dir: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(nsys).ok()?;
    let mut inc = None;
    let mut d = real.parent().map(Path::to_path_buf);
    for _ in 0..4 {
        let Some(dir) = d else { break };
        for cand in [
            dir.join("lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nvtx/include"),
            dir.join("target-linux-x64/nvtx/include"),
            dir.join("nvtx/include"),
        ] {
            if inc.is_none() && cand.join("nvtx3/nvToolsExt.h").is_file() {
                inc = Some(cand);
            }
        }
        d = dir.parent().map(Path::to_path_buf);
    }
    let Some(inc) = inc else {
        skip(&format!("SKIP {test}: no NVTX headers in the nsys install {}", nsys.display()));
        return None;
    };
    let server = dir.join("vibeserve_http");
    let src = root().join("scripts/cpu/vibeserve_http.c");
    match Command::new("gcc").args(["-O1", "-I"]).arg(&inc).arg(&src).arg("-o").arg(&server).arg("-ldl").output() {
        Ok(o) if o.status.success() => Some(server),
        Ok(o) => panic!("gcc failed on {}: {}", src.display(), String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            skip(&format!("SKIP {test}: no gcc ({e})"));
            None
        }
    }
}

/// A TCP port nothing listens on right now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Print a `SKIP <test>: <reason>` line and append it to the file named by `NSYSKIT_SKIP_LOG` (scripts/test
/// lists them at the end and fails under CI=true).
pub fn skip(line: &str) {
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("NSYSKIT_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{line}");
        }
    }
}
