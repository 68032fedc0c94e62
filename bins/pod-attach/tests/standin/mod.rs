//! A protocol-level stand-in for the Kubernetes API server, implementing only what pod-attach uses:
//! pod list/get, the `ephemeralcontainers` PATCH (strategic merge), sidecar status transitions, events, exec over
//! WebSocket (`v5.channel.k8s.io` / `v4.channel.k8s.io`: one channel byte + payload; 1 stdout, 2 stderr,
//! 3 status) and port-forward over WebSocket (data/error channels announced with the port number).
//!
//! The exec handler runs the argv as a real local process (cwd: a temporary "container root"), so `nsys`,
//! `tar`, `sha256sum`, `find`, `stat` and the `/proc` scans are real. Port-forward connects to 127.0.0.1:PORT,
//! where the test's stand-in engine listens. The sidecar is a real local `sleep N` process started on PATCH.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, patch};
use axum::{Json, Router};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const TOKEN: &str = "standin-secret-token-0f3a9c";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchMode {
    /// Sidecar goes waiting(ContainerCreating) → running.
    Ok,
    /// 403 Forbidden.
    Forbidden,
    /// Sidecar goes waiting(ErrImagePull) with events.
    ImagePullError,
}

/// How the stand-in subverts the copy-out (the hostile API server of issue 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TarFault {
    None,
    /// Send only part of the tar stream, then close without a status (an interrupted copy).
    Cut,
    /// Replace the tar stream with one whose entry is `../escaped.nsys-rep`.
    DotDot,
    /// The real stream, with its first file sent a second time with other bytes (same name, same size).
    Duplicate,
    /// The real stream plus an unexpected extra file.
    Extra,
    /// A symbolic link named like the report, pointing at `/etc/passwd`.
    Symlink,
    /// An entry with an absolute path.
    Absolute,
    /// The report's header announces 1.5 GB (its stat said far less).
    Oversize,
    /// The real stream followed by 1.5 GB of zeros, generated as it is sent (never held).
    Flood,
    /// The report's bytes changed in transit (same size): its sha256 check must fail and the file be deleted.
    Corrupt,
    /// Every exec of this program after its first N is accepted (the WebSocket upgraded) and never answered: no
    /// byte, no status, the socket held open until the client closes it (issue 42).
    Hang(&'static str, usize),
    /// The real tar stream sent one byte per second (issue 42).
    Trickle,
    /// A genuine large report: before the work folder is listed, its `.nsys-rep` is extended (sparse) to this
    /// many bytes, so the real stat, sha256sum and tar stream it.
    BigReport(u64),
}

pub const FLOOD_BYTES: u64 = 1_500_000_000;

pub struct Shared {
    pub pods: Vec<Value>,
    pub patch_mode: PatchMode,
    pub tar_fault: TarFault,
    pub root: PathBuf,
    pub execs: Vec<(String, Vec<String>)>,
    pub http: Vec<(u16, String)>,
    pub sidecar: Option<std::process::Child>,
    pub sidecar_polls: u32,
    pub saw_token: bool,
    pub env: HashMap<String, String>,
    /// Offer only `v4.channel.k8s.io` for exec (an older API server); else v5 and v4.
    pub v4_only: bool,
    /// Every request path (with query) the server received, in order.
    pub requests: Vec<String>,
    /// Execs of the program [`TarFault::Hang`] names, seen so far.
    pub hang_seen: usize,
    /// Execs the stand-in held open without answering, and whether each client went away (closed its socket).
    pub hung: Vec<(Vec<String>, bool)>,
}

pub struct StandIn {
    pub port: u16,
    pub state: Arc<Mutex<Shared>>,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    _thread: std::thread::JoinHandle<()>,
}

pub fn pod(name: &str, labels: Value, containers: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"nodeName": "node-1", "containers": containers.iter().map(|c| json!({"name": c, "image": "vllm/vllm-openai:v0.0-standin"})).collect::<Vec<_>>()},
        "status": {"phase": "Running", "containerStatuses": containers.iter().map(|c| json!({
            "name": c, "image": "vllm/vllm-openai:v0.0-standin", "imageID": "sha256:standin", "ready": true, "restartCount": 0,
            "state": {"running": {"startedAt": "2026-11-29T00:00:00Z"}}
        })).collect::<Vec<_>>()}
    })
}

fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

fn err(code: StatusCode, reason: &str, message: &str) -> Response {
    (code, Json(status_json(code.as_u16(), reason, message))).into_response()
}

type S = Arc<Mutex<Shared>>;

fn check_token(st: &S, headers: &axum::http::HeaderMap) {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {TOKEN}")) {
        st.lock().unwrap().saw_token = true;
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?'));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

fn query_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

async fn list_pods(State(st): State<S>, headers: axum::http::HeaderMap, RawQuery(q): RawQuery) -> Response {
    check_token(&st, &headers);
    let sel = query_pairs(q.as_deref().unwrap_or(""))
        .into_iter()
        .find(|(k, _)| k == "labelSelector")
        .map(|x| x.1)
        .unwrap_or_default();
    let s = st.lock().unwrap();
    let items: Vec<Value> = s
        .pods
        .iter()
        .filter(|p| {
            sel.split(',').filter(|x| !x.is_empty()).all(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                p["metadata"]["labels"][k].as_str() == Some(v)
            })
        })
        .cloned()
        .collect();
    Json(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}))
        .into_response()
}

async fn get_pod(
    State(st): State<S>,
    headers: axum::http::HeaderMap,
    Path((_ns, name)): Path<(String, String)>,
) -> Response {
    check_token(&st, &headers);
    let mut s = st.lock().unwrap();
    let mode = s.patch_mode;
    s.sidecar_polls += 1;
    let polls = s.sidecar_polls;
    let Some(p) = s.pods.iter_mut().find(|p| p["metadata"]["name"] == name.as_str()) else {
        return err(StatusCode::NOT_FOUND, "NotFound", &format!("pods \"{name}\" not found"));
    };
    // status transitions of the sidecar: first poll waiting, later running (or stuck in ErrImagePull)
    if let Some(ecs) = p["spec"]["ephemeralContainers"].as_array().cloned() {
        let statuses: Vec<Value> = ecs.iter().map(|c| {
            let state = match mode {
                PatchMode::ImagePullError => json!({"waiting": {"reason": "ErrImagePull", "message": format!("failed to pull image \"{}\": not found", c["image"].as_str().unwrap_or(""))}}),
                _ if polls < 2 => json!({"waiting": {"reason": "ContainerCreating"}}),
                _ => json!({"running": {"startedAt": "2026-11-29T00:00:01Z"}}),
            };
            // what a kubelet reports: the image with the digest it pulled
            let image = c["image"].as_str().unwrap_or("");
            let image_id = if image.contains("@sha256:") { image.to_string() } else { format!("{image}@sha256:{}", "ab".repeat(32)) };
            json!({"name": c["name"], "image": c["image"], "imageID": image_id, "ready": false, "restartCount": 0, "state": state})
        }).collect();
        p["status"]["ephemeralContainerStatuses"] = json!(statuses);
    }
    Json(p.clone()).into_response()
}

async fn patch_ephemeral(
    State(st): State<S>,
    headers: axum::http::HeaderMap,
    Path((_ns, name)): Path<(String, String)>,
    body: String,
) -> Response {
    check_token(&st, &headers);
    let ct = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    if ct != "application/strategic-merge-patch+json" {
        return err(StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType", &format!("content type {ct}"));
    }
    let mut s = st.lock().unwrap();
    if s.patch_mode == PatchMode::Forbidden {
        return err(StatusCode::FORBIDDEN, "Forbidden", &format!("pods \"{name}\" is forbidden: User \"standin\" cannot patch resource \"pods/ephemeralcontainers\" in API group \"\" in the namespace \"default\""));
    }
    let patch: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => return err(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
    };
    let mode = s.patch_mode;
    let Some(p) = s.pods.iter_mut().find(|p| p["metadata"]["name"] == name.as_str()) else {
        return err(StatusCode::NOT_FOUND, "NotFound", &format!("pods \"{name}\" not found"));
    };
    // strategic merge on the list keyed by name
    let mut list = p["spec"]["ephemeralContainers"].as_array().cloned().unwrap_or_default();
    let mut sleep_arg = None;
    for c in patch["spec"]["ephemeralContainers"].as_array().cloned().unwrap_or_default() {
        assert!(c["targetContainerName"].is_string(), "targetContainerName missing: {c}");
        sleep_arg = c["command"][1].as_str().map(String::from);
        list.retain(|x| x["name"] != c["name"]);
        list.push(c);
    }
    p["spec"]["ephemeralContainers"] = json!(list);
    let out = p.clone();
    if mode == PatchMode::Ok {
        if let Some(n) = sleep_arg {
            // the sidecar's `sleep N`, a real process cleanup has to end
            s.sidecar = Some(std::process::Command::new("sleep").arg(n).spawn().expect("sleep"));
        }
    }
    s.sidecar_polls = 0;
    Json(out).into_response()
}

async fn events(State(st): State<S>, headers: axum::http::HeaderMap) -> Response {
    check_token(&st, &headers);
    let s = st.lock().unwrap();
    let mut items = vec![];
    if s.patch_mode == PatchMode::ImagePullError {
        items.push(json!({"metadata": {"name": "e1", "namespace": "default"}, "involvedObject": {"kind": "Pod", "name": "engine-0"},
            "reason": "Failed", "message": "Failed to pull image \"registry.invalid/nsys@sha256:00\": rpc error: not found", "type": "Warning"}));
        items.push(json!({"metadata": {"name": "e2", "namespace": "default"}, "involvedObject": {"kind": "Pod", "name": "engine-0"},
            "reason": "BackOff", "message": "Back-off pulling image \"registry.invalid/nsys@sha256:00\"", "type": "Normal"}));
    }
    Json(json!({"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": items})).into_response()
}

async fn exec(
    State(st): State<S>,
    headers: axum::http::HeaderMap,
    RawQuery(q): RawQuery,
    ws: WebSocketUpgrade,
) -> Response {
    check_token(&st, &headers);
    let pairs = query_pairs(q.as_deref().unwrap_or(""));
    let argv: Vec<String> = pairs.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
    let container = pairs.iter().find(|(k, _)| k == "container").map(|x| x.1.clone()).unwrap_or_default();
    let v4_only = {
        let mut s = st.lock().unwrap();
        s.execs.push((container, argv.clone()));
        s.v4_only
    };
    let protocols: &[&'static str] =
        if v4_only { &["v4.channel.k8s.io"] } else { &["v5.channel.k8s.io", "v4.channel.k8s.io"] };
    ws.protocols(protocols.iter().copied()).on_upgrade(move |sock| run_exec(st, sock, argv))
}

fn tar_header(name: &str, size: usize) -> Vec<u8> {
    tar_header_t(name, size as u64, b'0', "")
}

fn tar_header_t(name: &str, size: u64, typ: u8, link: &str) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = typ;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    for b in &mut h[148..156] {
        *b = b' ';
    }
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

async fn run_exec(st: S, mut sock: WebSocket, argv: Vec<String>) {
    let (root, fault, env) = {
        let s = st.lock().unwrap();
        (s.root.clone(), s.tar_fault, s.env.clone())
    };
    let is_tar = argv.first().map(String::as_str) == Some("tar");
    if let TarFault::Hang(prog, skip) = fault {
        if argv.first().map(String::as_str) == Some(prog) {
            let n = {
                let mut s = st.lock().unwrap();
                s.hang_seen += 1;
                s.hang_seen
            };
            if n > skip {
                let i = {
                    let mut s = st.lock().unwrap();
                    s.hung.push((argv.clone(), false));
                    s.hung.len() - 1
                };
                // never answer; wait for the client to go away
                while let Some(Ok(m)) = sock.recv().await {
                    if matches!(m, Message::Close(_)) {
                        break;
                    }
                }
                st.lock().unwrap().hung[i].1 = true;
                return;
            }
        }
    }
    if let TarFault::BigReport(n) = fault {
        // before the work folder is listed: make its report a genuine large (sparse) file
        if argv.first().map(String::as_str) == Some("find") && argv.iter().any(|a| a == "%f\n") {
            if let Ok(rd) = std::fs::read_dir(&argv[1]) {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().ends_with(".nsys-rep") {
                        let f = std::fs::OpenOptions::new().write(true).open(e.path()).unwrap();
                        f.set_len(n).unwrap();
                    }
                }
            }
        }
    }
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(&root)
        .envs(&env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let msg = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": format!("exec: {e}"), "reason": "InternalError"});
            let mut f = vec![3u8];
            f.extend(msg.to_string().into_bytes());
            let _ = sock.send(Message::Binary(f.into())).await;
            let _ = sock.close().await;
            return;
        }
    };
    let mut out = child.stdout.take().unwrap();
    let mut errs = child.stderr.take().unwrap();
    let (mut o, mut e) = (Vec::new(), Vec::new());
    if matches!(fault, TarFault::None | TarFault::BigReport(_) | TarFault::Hang(..)) {
        // as a kubelet does: stdout goes out as it comes (a large tar stream is never held here either)
        let err_task = tokio::spawn(async move {
            let mut e = Vec::new();
            let _ = errs.read_to_end(&mut e).await;
            e
        });
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match out.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut f = vec![1u8];
                    f.extend_from_slice(&buf[..n]);
                    if sock.send(Message::Binary(f.into())).await.is_err() {
                        return;
                    }
                }
            }
        }
        e = err_task.await.unwrap_or_default();
    } else {
        let _ = tokio::join!(out.read_to_end(&mut o), errs.read_to_end(&mut e));
    }
    let status = child.wait().await.ok().and_then(|s| s.code()).unwrap_or(-1);
    let entry = |name: &str, body: &[u8]| {
        let mut t = tar_header(name, body.len());
        t.extend_from_slice(body);
        t.resize(t.len().div_ceil(512) * 512, 0);
        t
    };
    // the real stream without its end blocks: headers + bodies of the real entries
    let real_entries = |o: &[u8]| -> (Vec<u8>, String, usize) {
        let mut off = 0;
        let mut first = (String::new(), 0usize);
        while off + 512 <= o.len() && o[off..off + 512].iter().any(|&b| b != 0) {
            let h = &o[off..off + 512];
            let name = String::from_utf8_lossy(&h[..h[..100].iter().position(|&b| b == 0).unwrap_or(100)]).to_string();
            let size = usize::from_str_radix(
                String::from_utf8_lossy(&h[124..135]).trim_matches(|c: char| c == '\0' || c == ' '),
                8,
            )
            .unwrap_or(0);
            if first.0.is_empty() {
                first = (name, size);
            }
            off += 512 + size.div_ceil(512) * 512;
        }
        (o[..off].to_vec(), first.0, first.1)
    };
    let end = |mut t: Vec<u8>| {
        t.extend(vec![0u8; 1024]);
        t.resize(t.len().div_ceil(10240) * 10240, 0);
        t
    };
    if is_tar {
        match fault {
            TarFault::DotDot => o = end(entry("../escaped.nsys-rep", b"not what tar sent")),
            TarFault::Absolute => o = end(entry("/tmp/escaped.nsys-rep", b"not what tar sent")),
            TarFault::Duplicate => {
                let (mut t, name, size) = real_entries(&o);
                t.extend(entry(&name, &vec![b'X'; size]));
                o = end(t);
            }
            TarFault::Extra => {
                let (mut t, _, _) = real_entries(&o);
                t.extend(entry("extra.sh", b"#!/bin/sh\necho pwned\n"));
                o = end(t);
            }
            TarFault::Symlink => {
                let (_, name, _) = real_entries(&o);
                o = end(tar_header_t(&name, 0, b'2', "/etc/passwd"));
            }
            TarFault::Oversize => {
                let (_, name, _) = real_entries(&o);
                let mut t = tar_header_t(&name, FLOOD_BYTES, b'0', "");
                t.extend(vec![0u8; 1 << 20]);
                o = t;
            }
            TarFault::Corrupt => {
                // flip one byte of the first file's body
                o[512] ^= 0xff;
            }
            _ => {}
        }
    }
    if is_tar && fault == TarFault::Flood {
        for chunk in o.chunks(32 * 1024) {
            let mut f = vec![1u8];
            f.extend_from_slice(chunk);
            if sock.send(Message::Binary(f.into())).await.is_err() {
                return;
            }
        }
        let zeros = vec![0u8; 1 << 20];
        let mut sent = 0u64;
        while sent < FLOOD_BYTES {
            let mut f = vec![1u8];
            f.extend_from_slice(&zeros);
            if sock.send(Message::Binary(f.into())).await.is_err() {
                return;
            }
            sent += zeros.len() as u64;
        }
        o.clear();
    }
    if is_tar && fault == TarFault::Trickle {
        for b in &o {
            if sock.send(Message::Binary(vec![1u8, *b].into())).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        o.clear();
    }
    let cut = is_tar && fault == TarFault::Cut;
    if cut {
        o.truncate(o.len() / 2);
    }
    for chunk in o.chunks(32 * 1024) {
        let mut f = vec![1u8];
        f.extend_from_slice(chunk);
        if sock.send(Message::Binary(f.into())).await.is_err() {
            return;
        }
    }
    if cut {
        let _ = sock.close().await;
        return;
    }
    if !e.is_empty() {
        let mut f = vec![2u8];
        f.extend_from_slice(&e);
        let _ = sock.send(Message::Binary(f.into())).await;
    }
    let st = if status == 0 {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
    } else {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": format!("command terminated with non-zero exit code: {status}"),
               "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": status.to_string()}]}})
    };
    let mut f = vec![3u8];
    f.extend(st.to_string().into_bytes());
    let _ = sock.send(Message::Binary(f.into())).await;
    let _ = sock.close().await;
}

async fn portforward(
    State(st): State<S>,
    headers: axum::http::HeaderMap,
    RawQuery(q): RawQuery,
    ws: WebSocketUpgrade,
) -> Response {
    check_token(&st, &headers);
    let port: u16 = query_pairs(q.as_deref().unwrap_or(""))
        .into_iter()
        .find(|(k, _)| k == "ports")
        .and_then(|x| x.1.parse().ok())
        .unwrap_or(0);
    ws.protocols(["v4.channel.k8s.io", "portforward.k8s.io"]).on_upgrade(move |sock| run_portforward(st, sock, port))
}

async fn run_portforward(st: S, sock: WebSocket, port: u16) {
    let (mut tx, mut rx) = sock.split();
    let p = port.to_le_bytes();
    let _ = tx.send(Message::Binary(vec![0u8, p[0], p[1]].into())).await;
    let _ = tx.send(Message::Binary(vec![1u8, p[0], p[1]].into())).await;
    let tcp = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(t) => t,
        Err(e) => {
            let mut f = vec![1u8];
            f.extend(format!("error forwarding port {port}: {e}").into_bytes());
            let _ = tx.send(Message::Binary(f.into())).await;
            let _ = tx.close().await;
            return;
        }
    };
    let (mut tr, mut tw) = tcp.into_split();
    let mut req = Vec::new();
    let up = async {
        while let Some(Ok(m)) = rx.next().await {
            match m {
                Message::Binary(b) if b.len() > 1 && b[0] == 0 => {
                    req.extend_from_slice(&b[1..]);
                    if tw.write_all(&b[1..]).await.is_err() {
                        break;
                    }
                }
                Message::Close(_) => break,
                _ => {}
            }
        }
        req
    };
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match tr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut f = vec![0u8];
                    f.extend_from_slice(&buf[..n]);
                    if tx.send(Message::Binary(f.into())).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = tx.close().await;
    };
    tokio::pin!(up);
    let req = tokio::select! {
        r = &mut up => r,
        _ = down => Vec::new(),
    };
    let _ = req;
    let line = String::new();
    st.lock().unwrap().http.push((port, line));
}

async fn record(State(st): State<S>, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let pq = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    st.lock().unwrap().requests.push(format!("{} {pq}", req.method()));
    next.run(req).await
}

async fn fallback() -> Response {
    err(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource")
}

impl StandIn {
    pub fn start(pods: Vec<Value>, patch_mode: PatchMode, tar_fault: TarFault) -> StandIn {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let state = Arc::new(Mutex::new(Shared {
            pods,
            patch_mode,
            tar_fault,
            root,
            execs: vec![],
            http: vec![],
            sidecar: None,
            sidecar_polls: 0,
            saw_token: false,
            env: HashMap::new(),
            v4_only: false,
            requests: vec![],
            hang_seen: 0,
            hung: vec![],
        }));
        let (ptx, prx) = std::sync::mpsc::channel();
        let st2 = state.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let app = Router::new()
                    .route("/api/v1/namespaces/{ns}/pods", get(list_pods))
                    .route("/api/v1/namespaces/{ns}/pods/{name}", get(get_pod))
                    .route("/api/v1/namespaces/{ns}/pods/{name}/ephemeralcontainers", patch(patch_ephemeral))
                    .route("/api/v1/namespaces/{ns}/pods/{name}/exec", any(exec))
                    .route("/api/v1/namespaces/{ns}/pods/{name}/portforward", any(portforward))
                    .route("/api/v1/namespaces/{ns}/events", get(events))
                    .fallback(fallback)
                    .layer(axum::middleware::from_fn_with_state(st2.clone(), record))
                    .with_state(st2);
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                ptx.send(l.local_addr().unwrap().port()).unwrap();
                axum::serve(l, app).await.unwrap();
            });
        });
        let port = prx.recv().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    token: {TOKEN}\ncontexts:\n- name: c\n  context:\n    cluster: standin\n    user: u\n    namespace: default\ncurrent-context: c\n"
        )).unwrap();
        StandIn { port, state, dir, kubeconfig, _thread: thread }
    }

    pub fn root(&self) -> PathBuf {
        self.state.lock().unwrap().root.clone()
    }

    /// Did the sidecar's sleep end (cleanup ended it)?
    pub fn sidecar_ended(&self) -> Option<bool> {
        let mut s = self.state.lock().unwrap();
        let c = s.sidecar.as_mut()?;
        for _ in 0..20 {
            if c.try_wait().unwrap().is_some() {
                return Some(true);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Some(false)
    }

    pub fn exec_argv0s(&self) -> Vec<String> {
        self.state.lock().unwrap().execs.iter().map(|(_, a)| a.join(" ")).collect()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(c) = self.state.lock().unwrap().sidecar.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
