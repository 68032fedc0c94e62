use super::*;

fn opts() -> Options {
    Options {
        namespace: "ns".into(),
        pod: Some("p".into()),
        selector: None,
        container: Some("engine".into()),
        image: DEFAULT_SIDECAR_IMAGE.into(),
        allow_unpinned_image: false,
        install_nsys: None,
        profile: SecurityProfile::General,
        strategy: Strategy::Endpoint,
        process_match: DEFAULT_PROCESS_MATCH.into(),
        duration_s: 5.0,
        nsys: "nsys".into(),
        workdir: "/tmp/nsyskit-pod-attach-x".into(),
        out_dir: "out".into(),
        max_copy_bytes: None,
        bundle: None,
        port: 8000,
        session: "s".into(),
        sidecar_name: "nsyskit-x".into(),
        sidecar_sleep_s: 3600,
        wait_timeout_s: 60,
        capture_name: "capture".into(),
        min_rep_bytes: None,
        nsys_source_image: None,
        nsys_launch_change: None,
        workload: Default::default(),
    }
}

#[test]
fn every_remote_step_has_a_deadline_from_the_wait_timeout() {
    let mut o = opts();
    o.duration_s = 2.5;
    assert_eq!(o.step_deadline(), Duration::from_secs(60));
    assert_eq!(o.work_deadline(), Duration::from_secs(600));
    assert_eq!(o.attach_deadline(), Duration::from_secs(603));
    assert_eq!(o.copy_deadline(0), Duration::from_secs(60));
    assert_eq!(o.copy_deadline(1_436_765), Duration::from_secs(62));
    o.wait_timeout_s = u64::MAX;
    assert_eq!(o.copy_deadline(u64::MAX), Duration::from_secs(u64::MAX));
    o.wait_timeout_s = 0;
    let e = o.validate().unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("--wait-timeout must be a positive"), "{}", e.message);
}

fn real_help(v: &str, f: &str) -> String {
    std::fs::read_to_string(format!("{}/fixtures/nsys-help/{v}/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn real_nsys_help_texts() {
    let c23 =
        NsysCaps::from_help(&real_help("2023.4.4", "version.txt"), "", &real_help("2023.4.4", "profile-help.txt"));
    assert!(c23.capture_range && c23.capture_range_end && !c23.attach_pid, "{c23:?}");
    assert_eq!(c23.version.as_deref(), Some("2023.4.4.54-234433681190v0"));
    let c25 = NsysCaps::from_help("", "", &real_help("2025.3.1", "profile-help.txt"));
    assert!(c25.capture_range && c25.capture_range_end && !c25.attach_pid, "{c25:?}");
    assert!(choose_strategy(Strategy::Attach, &c25).is_err());
}

#[test]
fn attach_refused_without_flag_and_endpoint_allowed() {
    let caps = NsysCaps::from_help(
        "NVIDIA Nsight Systems version 2023.4.4",
        "\tlaunch   Launch\n\tstart   Start\n\tstop   Stop\n",
        &real_help("2023.4.4", "profile-help.txt"),
    );
    let e = choose_strategy(Strategy::Attach, &caps).unwrap_err();
    assert!(e.message.contains("--attach-pid") && e.message.contains("2023.4.4"), "{}", e.message);
    assert_eq!(choose_strategy(Strategy::Endpoint, &caps).unwrap(), Strategy::Endpoint);
    assert_eq!(choose_strategy(Strategy::Session, &caps).unwrap(), Strategy::Session);
    let no = NsysCaps::default();
    assert!(choose_strategy(Strategy::Endpoint, &no).unwrap_err().message.contains("--capture-range"));
    assert!(choose_strategy(Strategy::Session, &no).unwrap_err().message.contains("launch/start/stop"));
}

#[test]
fn plan_has_patch_body_and_argv_arrays() {
    let p = plan(&opts());
    let patch = p.iter().find_map(|s| match s {
        PlanStep::Api { method, path, body, .. } if method == "PATCH" => Some((path.clone(), body.clone().unwrap())),
        _ => None,
    });
    let (path, body) = patch.expect("a PATCH");
    assert_eq!(path, "/api/v1/namespaces/ns/pods/p/ephemeralcontainers");
    let c = &body["spec"]["ephemeralContainers"][0];
    assert_eq!(c["targetContainerName"], "engine");
    assert_eq!(c["command"], serde_json::json!(["sleep", "3600"]));
    assert_eq!(c["securityContext"]["capabilities"]["add"][0], "SYS_PTRACE");
    // a user value never lands inside a script text
    let mut o = opts();
    o.process_match = "x'; rm -rf / #".into();
    for st in plan(&o) {
        if let PlanStep::Exec { argv, .. } = st {
            assert!(!argv.iter().any(|a| a.contains("rm -rf /")), "{argv:?}");
        }
    }
    let mut o = opts();
    o.strategy = Strategy::Session;
    assert!(!plan(&o).iter().any(|s| matches!(s, PlanStep::Api { method, .. } if method == "PATCH")));
}

fn pe(pid: u32, ppid: u32, cuda: bool, cmd: &str) -> ProcEntry {
    ProcEntry { pid, ppid, cuda, cmdline: cmd.into() }
}

#[test]
fn engine_follows_children_to_cuda_owner() {
    let procs = vec![
        pe(
            1,
            0,
            false,
            "/usr/bin/nsys profile --capture-range=cudaProfilerApi --capture-range-end=repeat -o /out/run vllm serve m",
        ),
        pe(7, 1, false, "python3 /usr/bin/vllm serve m"),
        pe(9, 7, true, "VLLM::EngineCore"),
        pe(12, 7, false, "python3 -c from multiprocessing.resource_tracker import main"),
    ];
    let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
    assert_eq!(c.pid, 9);
    assert!(c.cuda_owner);
    assert_eq!(c.nsys_ancestor.as_ref().unwrap().pid, 1);
    let ep = check_endpoint_nsys(&c).unwrap();
    assert_eq!(
        ep,
        EndpointNsys { dir: Some("/out".into()), report_name: Some("run.nsys-rep".into()), end: RangeEnd::Repeat }
    );
}

#[test]
fn engine_not_found_or_ambiguous_lists_candidates() {
    let e = select_engine(&[pe(1, 0, false, "sleep 10")], DEFAULT_PROCESS_MATCH).unwrap_err();
    assert!(e.message.contains("no process matches") && e.message.contains("sleep 10"));
    let two = vec![pe(3, 1, true, "vllm serve a"), pe(4, 1, true, "vllm serve b")];
    let e = select_engine(&two, DEFAULT_PROCESS_MATCH).unwrap_err();
    assert!(
        e.message.contains("ambiguous") && e.message.contains("vllm serve a") && e.message.contains("vllm serve b"),
        "{}",
        e.message
    );
    let two_cpu = vec![pe(3, 1, false, "vllm serve a"), pe(4, 1, false, "vllm serve b")];
    assert!(select_engine(&two_cpu, DEFAULT_PROCESS_MATCH).unwrap_err().message.contains("2 processes match"));
}

#[test]
fn endpoint_refuses_wrong_capture_range() {
    let procs = vec![
        pe(1, 0, false, "nsys profile --capture-range=cudaProfilerApi python3 -m vllm serve"),
        pe(2, 1, true, "vllm serve m"),
    ];
    let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
    let e = check_endpoint_nsys(&c).unwrap_err();
    assert!(
        e.message.contains("--capture-range-end=stop") && e.message.contains("(none: stop-shutdown)"),
        "{}",
        e.message
    );
    for bad in ["stop-shutdown", "repeat-shutdown:2", "none"] {
        let procs = vec![
            pe(1, 0, false, &format!("nsys profile -c cudaProfilerApi --capture-range-end={bad} vllm serve")),
            pe(2, 1, true, "vllm serve m"),
        ];
        let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
        assert!(check_endpoint_nsys(&c).unwrap_err().message.contains("refused"), "{bad}");
    }
    // stop: accepted, one report per engine start; relative -o → the cwd
    let procs = vec![
        pe(
            1,
            0,
            false,
            "nsys profile --capture-range cudaProfilerApi --capture-range-end stop -o eng.nsys-rep vllm serve",
        ),
        pe(2, 1, true, "vllm serve m"),
    ];
    let c = select_engine(&procs, DEFAULT_PROCESS_MATCH).unwrap();
    let ep = check_endpoint_nsys(&c).unwrap();
    assert_eq!(ep, EndpointNsys { dir: None, report_name: Some("eng.nsys-rep".into()), end: RangeEnd::Stop });
    let rf = |p: &str| ReportFile { size: 10, mtime: 1, path: p.into() };
    assert_eq!(stop_range_used(&ep, &[rf("/proc/1/cwd/other.nsys-rep")]), None);
    assert_eq!(stop_range_used(&ep, &[rf("/proc/1/cwd/eng.nsys-rep")]), Some(rf("/proc/1/cwd/eng.nsys-rep")));
    let rep = EndpointNsys { end: RangeEnd::Repeat, ..ep };
    assert_eq!(stop_range_used(&rep, &[rf("/proc/1/cwd/eng.nsys-rep")]), None);
    let bare = select_engine(&[pe(2, 1, true, "vllm serve m")], DEFAULT_PROCESS_MATCH).unwrap();
    assert!(check_endpoint_nsys(&bare).unwrap_err().message.contains("does not run under `nsys profile`"));
}

#[test]
fn proc_listing_drops_the_lister() {
    let t =
        "self\t50\n1\t0\t0\tnsys profile x\n50\t0\t0\tsh -c ...\n51\t50\t0\tls -l /proc/1/fd\n7\t1\t1\tvllm serve m\n";
    let v = parse_proc_listing(t).unwrap();
    assert_eq!(v.iter().map(|e| e.pid).collect::<Vec<_>>(), vec![1, 7]);
    assert!(parse_proc_listing("x\ty\n").unwrap_err().message.contains("line 1"));
}

fn tar_header(name: &str, size: usize, typ: u8) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    let sz = format!("{size:011o}");
    h[124..135].copy_from_slice(sz.as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = typ;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    for b in &mut h[148..156] {
        *b = b' ';
    }
    let sum: u32 = h.iter().map(|&b| b as u32).sum();
    let cs = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(cs.as_bytes());
    h
}

fn tar_of(entries: &[(&str, &[u8], u8)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (n, d, t) in entries {
        v.extend(tar_header(n, d.len(), *t));
        v.extend_from_slice(d);
        v.resize(v.len().div_ceil(512) * 512, 0);
    }
    v.extend(vec![0u8; 1024]);
    v
}

fn exp(files: &[(&str, &[u8])]) -> BTreeMap<String, Expected> {
    files.iter().map(|(n, d)| (n.to_string(), Expected { size: d.len() as u64, sha256: sha256_hex(d) })).collect()
}

fn sink_run(dir: &Path, want: &[(&str, &[u8])], stream: &[u8], chunk: usize) -> Result<Vec<CopiedFile>> {
    let mut s = TarSink::new(dir, exp(want), None)?;
    for c in stream.chunks(chunk) {
        s.feed(c)?;
    }
    s.commit()
}

fn only_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    v.sort();
    v
}

#[test]
fn tar_sink_streams_checks_and_refuses() {
    let want: &[(&str, &[u8])] = &[("capture.nsys-rep", b"abc"), ("capture.sqlite", b"")];
    let ok = tar_of(&[("capture.nsys-rep", b"abc", b'0'), ("capture.sqlite", b"", b'0')]);
    for chunk in [1, 7, 512, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        let files = sink_run(dir.path(), want, &ok, chunk).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].sha256, sha256_hex(b"abc"));
        assert_eq!(std::fs::read(dir.path().join("capture.nsys-rep")).unwrap(), b"abc");
        assert_eq!(only_files(dir.path()), vec!["capture.nsys-rep", "capture.sqlite"], "staging removed");
    }
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // the same file twice: the first copy matches, the second is other bytes
        (
            tar_of(&[
                ("capture.nsys-rep", b"abc", b'0'),
                ("capture.nsys-rep", b"xyz", b'0'),
                ("capture.sqlite", b"", b'0'),
            ]),
            "the same file a second time",
        ),
        (tar_of(&[("../evil", b"x", b'0')]), "`..` component rejected"),
        (tar_of(&[("a/../../evil", b"x", b'0')]), "`..` component rejected"),
        (tar_of(&[("/etc/evil", b"x", b'0')]), "absolute path rejected"),
        (tar_of(&[("capture.nsys-rep", b"", b'2')]), "a symbolic link"),
        (tar_of(&[("capture.nsys-rep", b"", b'1')]), "a hard link"),
        (
            tar_of(&[("capture.nsys-rep", b"abc", b'0'), ("capture.sqlite", b"", b'0'), ("extra.sh", b"x", b'0')]),
            "unexpected extra file",
        ),
        (tar_of(&[("sub/capture.sqlite", b"", b'0')]), "not a plain file name"),
        (tar_of(&[("capture.nsys-rep", b"abd", b'0'), ("capture.sqlite", b"", b'0')]), "differs"),
        (tar_of(&[("capture.nsys-rep", b"abcdef", b'0')]), "announces 6 bytes, the container's stat said 3"),
        (tar_of(&[("capture.nsys-rep", b"abc", b'0')]), "capture.sqlite missing"),
        (ok[..600].to_vec(), "interrupted"),
        (
            {
                let mut v = ok.clone();
                v.extend_from_slice(b"junk");
                v
            },
            "data after the end-of-archive",
        ),
    ];
    for (stream, want_msg) in cases {
        let dir = tempfile::tempdir().unwrap();
        let e = sink_run(dir.path(), want, &stream, 333).unwrap_err();
        assert!(e.message.contains(want_msg), "{want_msg}: {}", e.message);
        assert!(only_files(dir.path()).is_empty(), "{want_msg}: nothing kept: {:?}", only_files(dir.path()));
        assert!(!dir.path().parent().unwrap().join("evil").exists());
    }
    // a stream longer than the listed files allow is cut at the cap
    let dir = tempfile::tempdir().unwrap();
    let mut flood = ok.clone();
    flood.extend(vec![0u8; 200_000]);
    let e = sink_run(dir.path(), want, &flood, 4096).unwrap_err();
    assert!(e.message.contains("runs past 10240 bytes"), "{}", e.message);
    // --max-copy-bytes refuses a total over it before anything is copied
    let sizes: BTreeMap<String, u64> = [("a".to_string(), 10u64), ("b".to_string(), 20)].into();
    let sums: BTreeMap<String, String> = [("a".to_string(), "0".repeat(64)), ("b".to_string(), "0".repeat(64))].into();
    let e = expected_files(&["a".into(), "b".into()], &sizes, &sums, Some(29)).unwrap_err();
    assert!(e.message.contains("total 30 bytes") && e.message.contains("--max-copy-bytes 29"), "{}", e.message);
    assert!(expected_files(&["a".into(), "b".into()], &sizes, &sums, Some(30)).is_ok());
}

#[test]
fn tar_sink_does_not_follow_symlinks_in_out_dir() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, b"keep me").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::symlink(&victim, out.join("capture.nsys-rep")).unwrap();
    let want: &[(&str, &[u8])] = &[("capture.nsys-rep", b"abc")];
    let files = sink_run(&out, want, &tar_of(&[("capture.nsys-rep", b"abc", b'0')]), 512).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me", "the link's target is untouched");
    assert!(!std::fs::symlink_metadata(out.join("capture.nsys-rep")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(out.join("capture.nsys-rep")).unwrap(), b"abc");
}

#[test]
fn names_workdir_and_image_validation() {
    for ok in ["vllm-0", "a", "a.b-c", "x1.y2"] {
        assert!(is_dns1123_subdomain(ok), "{ok}");
    }
    for bad in ["", "..", "../x", "a/b", "A", "-a", "a-", "a..b", "a%2Fb", "a b", &"x".repeat(254)] {
        assert!(!is_dns1123_subdomain(bad), "{bad}");
    }
    assert!(is_dns1123_label("inference") && !is_dns1123_label("a.b") && !is_dns1123_label(&"x".repeat(64)));
    for bad in [
        "/tmp",
        "/",
        "/root",
        "/tmp/",
        "tmp/nsyskit-pod-attach-x",
        "/tmp/nsyskit-pod-attach-",
        "/tmp/../nsyskit-pod-attach-x",
        "/tmp//nsyskit-pod-attach-x",
        "/tmp/./nsyskit-pod-attach-x",
        "/tmp/nsyskit-pod-attach-x/",
        "/tmp/nsyskit-pod-attach-x y",
        "/home/u",
    ] {
        let e = check_workdir(bad).unwrap_err();
        assert_eq!(e.arg.as_deref(), Some("--workdir"), "{bad}");
    }
    check_workdir("/tmp/nsyskit-pod-attach-1f").unwrap();
    check_workdir("/scratch/run/nsyskit-pod-attach-a.b_c").unwrap();
    assert_eq!(
        image_digest(DEFAULT_SIDECAR_IMAGE).unwrap().as_deref(),
        Some("sha256:3146de96f6022a8cc36f86d1b8c0281cb940e51e2c3dc49c315646ad66ede43d")
    );
    assert_eq!(image_digest(PATH_B_IMAGE).unwrap(), None);
    assert!(image_digest("r/x@sha256:00").is_err());
    let mut o = opts();
    o.image = PATH_B_IMAGE.into();
    let e = o.validate().unwrap_err();
    assert!(e.message.contains("not pinned by digest") && e.arg.as_deref() == Some("--image"), "{}", e.message);
    o.allow_unpinned_image = true;
    o.validate().unwrap();
    let f = Flags { pod: Some("vllm-0".into()), ..Flags::default() };
    let o = options(&f).unwrap();
    assert_eq!(o.image, DEFAULT_SIDECAR_IMAGE);
    assert_eq!(o.duration_s, 120.0);
    assert!(o.workdir.starts_with("/tmp/nsyskit-pod-attach-"));
    for (flag, f) in [
        ("--pod", Flags { pod: Some("../etc".into()), ..Flags::default() }),
        ("--namespace", Flags { pod: Some("p".into()), namespace: "a/b".into(), ..Flags::default() }),
        ("--container", Flags { pod: Some("p".into()), container: Some("X".into()), ..Flags::default() }),
        ("--workdir", Flags { pod: Some("p".into()), workdir: Some("/tmp".into()), ..Flags::default() }),
        ("--install-nsys", Flags { pod: Some("p".into()), install_nsys: Some("yum".into()), ..Flags::default() }),
    ] {
        assert_eq!(options(&f).unwrap_err().arg.as_deref(), Some(flag));
    }
    assert_eq!(url_encode("app=vllm,tier in (a b)"), "app%3Dvllm%2Ctier%20in%20%28a%20b%29");
}

#[test]
fn engine_env_checks() {
    let nsys_inj = "CUDA_INJECTION64_PATH=/opt/nvidia/nsight-systems/target-linux-x64/libToolsInjection64.so\n";
    let e = parse_env_check(9, nsys_inj);
    assert!(e.readable && e.nsys_injection);
    assert!(check_engine_env(Strategy::Session, &e).unwrap().is_empty());
    assert!(check_engine_env(Strategy::Attach, &e).unwrap_err().message.contains("already runs under nsys"));
    let zym = parse_env_check(9, "CUDA_INJECTION64_PATH=/opt/zymtrace/libzymtrace_cuda.so\n");
    for s in [Strategy::Endpoint, Strategy::Session, Strategy::Attach] {
        let m = check_engine_env(s, &zym).unwrap_err().message;
        assert!(m.contains("/opt/zymtrace/libzymtrace_cuda.so") && m.contains("refused"), "{m}");
    }
    let none = parse_env_check(9, "");
    assert!(check_engine_env(Strategy::Attach, &none).unwrap().is_empty());
    assert!(check_engine_env(Strategy::Session, &none).unwrap()[0].contains("no CUDA_INJECTION64_PATH"));
    let unread = parse_env_check(9, "unreadable\n");
    assert!(
        !unread.readable
            && check_engine_env(Strategy::Attach, &unread).unwrap()[0].contains("cannot read /proc/9/environ")
    );
    // vLLM's profiler switch, endpoint only
    let mut v = parse_env_check(9, nsys_inj);
    note_cmdlines(&mut v, &["VLLM::EngineCore".into(), "python3 /usr/bin/vllm serve m --port 8000".into()]);
    assert!(v.vllm && !v.profiler_config_cuda);
    assert!(check_engine_env(Strategy::Endpoint, &v).unwrap_err().message.contains("--profiler-config.profiler=cuda"));
    assert!(check_engine_env(Strategy::Session, &v).is_ok());
    for cmd in [
        "vllm serve m --profiler-config.profiler=cuda",
        "vllm serve m --profiler-config.profiler cuda",
        r#"vllm serve m --profiler-config {"profiler": "cuda"}"#,
    ] {
        let mut v2 = v.clone();
        note_cmdlines(&mut v2, &[cmd.into()]);
        assert!(v2.profiler_config_cuda, "{cmd}");
        assert!(check_engine_env(Strategy::Endpoint, &v2).unwrap().is_empty(), "{cmd}");
    }
    let mut old = parse_env_check(9, &format!("{nsys_inj}VLLM_TORCH_CUDA_PROFILE=1\n"));
    note_cmdlines(&mut old, &["python3 -m vllm.entrypoints.openai.api_server".into()]);
    assert!(old.vllm && check_engine_env(Strategy::Endpoint, &old).unwrap().is_empty());
    let mut other = parse_env_check(9, nsys_inj);
    note_cmdlines(&mut other, &["python3 serve.py".into()]);
    assert!(check_engine_env(Strategy::Endpoint, &other).unwrap()[0].contains("not a vLLM command line"));
    // a value cannot fake a line: the script turns newlines inside values into spaces
    assert!(ENV_CHECK_SCRIPT.contains(r"tr '\000\n' '\n '"));
}

#[test]
fn plan_shows_default_image_and_path_b_install() {
    let o =
        options(&Flags { pod: Some("vllm-0".into()), container: Some("engine".into()), ..Flags::default() }).unwrap();
    let p = plan(&o);
    let patch = p
        .iter()
        .find_map(|s| match s {
            PlanStep::Api { body: Some(b), .. } => Some(b.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(patch["spec"]["ephemeralContainers"][0]["image"], DEFAULT_SIDECAR_IMAGE);
    assert!(p.iter().any(|s| matches!(s, PlanStep::Wait { seconds, .. } if *seconds == 120.0)));
    let b = options(&Flags {
        pod: Some("vllm-0".into()),
        image: Some(PATH_B_IMAGE.into()),
        allow_unpinned_image: true,
        install_nsys: Some("apt".into()),
        ..Flags::default()
    })
    .unwrap();
    let argvs: Vec<Vec<String>> = plan(&b)
        .into_iter()
        .filter_map(|s| match s {
            PlanStep::Exec { argv, .. } => Some(argv),
            _ => None,
        })
        .collect();
    let i = argvs.iter().position(|a| a.contains(&"install".to_string())).expect("install step");
    assert_eq!(
        argvs[i],
        s(&[
            "env",
            "DEBIAN_FRONTEND=noninteractive",
            "apt-get",
            "-q",
            "-y",
            "install",
            "--no-install-recommends",
            "nsight-systems-cli"
        ])
    );
    assert_eq!(argvs[i + 1][0], "dpkg-query");
    let probe = argvs.iter().position(|a| a.get(1).map(String::as_str) == Some("--version")).unwrap();
    assert!(i < probe, "install before the nsys probe");
}

#[test]
fn sha_and_listings() {
    assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    let m = parse_sha256sum("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  /w/capture.nsys-rep\n")
        .unwrap();
    assert_eq!(m["capture.nsys-rep"].len(), 64);
    assert_eq!(parse_sizes("3\t/w/capture.nsys-rep\n").unwrap()["capture.nsys-rep"], 3);
    let names =
        files_to_copy("capture.nsys-rep\ncapture.sqlite\ncapture_nvtx_sum.csv\nother.txt\n", "capture").unwrap();
    assert_eq!(names, vec!["capture.nsys-rep", "capture.sqlite", "capture_nvtx_sum.csv"]);
    assert!(files_to_copy("capture.sqlite\n", "capture").is_err());
    let before = parse_report_listing("10\t100\t/o/a.nsys-rep\n");
    let after = parse_report_listing("10\t100\t/o/a.nsys-rep\n20\t200\t/o/a.1.nsys-rep\n");
    assert_eq!(new_reports(&before, &after)[0].path, "/o/a.1.nsys-rep");
}
#[test]
fn library_gate_matches_gate_run() {
    let fx = |p: &str| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(p);
    let (rep, sqlite) = (fx("nsys-2023.4.4/cpu_nvtx_osrt.nsys-rep"), fx("nsys-2023.4.4/cpu_nvtx_osrt.sqlite"));
    let g = run_gate(&Gate::Library, &rep, &sqlite);
    assert_eq!(g.verdict, "RETRY", "{}", g.reason);
    let want = crate::gate_check::run(&crate::gate_check::GateOptions {
        capture: rep.clone(),
        sqlite: Some(sqlite.clone()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(g.document.unwrap(), serde_json::to_value(&want).unwrap());
    assert!(g.reason.starts_with("gate-check (library): gates "), "{}", g.reason);
    assert_eq!(run_gate(&Gate::Library, &rep, &fx("nope.sqlite")).verdict, "NOT_RUN");
}

/// `--bundle` on a real kernel CSV (nsys 2025.3.1 on the H200): the seed's fields, top_kernels from the CSV,
/// the files under profiles/ with the sha256 of the bytes written, the bundle's other bytes kept.
#[test]
fn bundle_fills_kernel_profile_from_a_real_csv() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let csv = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/nsys-2025.3.1/stats/gpu_full_node_cuda_gpu_kern_sum.csv");
    let mut files = Vec::new();
    for (name, bytes) in [
        ("capture.nsys-rep", b"not a real report".to_vec()),
        ("capture_cuda_gpu_kern_sum.csv", std::fs::read(&csv).unwrap()),
        ("capture_cuda_api_sum.csv", b"x".to_vec()),
    ] {
        std::fs::write(out.join(name), &bytes).unwrap();
        files.push(CopiedFile {
            name: name.into(),
            path: out.join(name).display().to_string(),
            size: bytes.len() as u64,
            sha256: sha256_hex(&bytes),
        });
    }
    let mut o = opts();
    o.bundle = Some(dir.path().join("b").display().to_string());
    let mut doc = dry_run(&o).unwrap();
    doc.dry_run = false;
    doc.files = files;
    doc.provenance = Some(PodProvenance {
        namespace: "ns".into(),
        pod: "p".into(),
        pod_uid: None,
        node: None,
        container: "engine".into(),
        container_image: None,
        sidecar: Some("nsyskit-x".into()),
        sidecar_image: Some(DEFAULT_SIDECAR_IMAGE.into()),
        sidecar_image_digest: image_digest(DEFAULT_SIDECAR_IMAGE).unwrap(),
        sidecar_image_id: None,
        nsys_install: None,
        nsys: NsysCaps::default(),
        engine: Some(EngineChoice {
            pid: 4242,
            cmdline: "VLLM::EngineCore".into(),
            cuda_owner: true,
            matched: vec![4242],
            nsys_ancestor: None,
        }),
        engine_env: None,
        captured_at: Some("2026-12-01T13:00:00Z".into()),
        source_report: None,
        started_at_unix_s: 0.0,
        capture_s: 5.0,
        ..Default::default()
    });
    let b = dir.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let before = "{\"run_id\": \"x\",\n \"n\": 1.0, \"kernel_profile\": {\"keep\": [1 ,2]}}\n";
    std::fs::write(b.join(BUNDLE_FILE), before).unwrap();
    write_bundle(&b, &mut doc, &o).unwrap();
    let kp = doc.kernel_profile.clone().unwrap();
    assert_eq!(kp.captured_at, "2026-12-01T13:00:00Z");
    assert_eq!(
        (kp.nsys_rep_path.as_str(), kp.summary_csv_path.as_deref(), kp.cuda_api_csv_path.as_deref()),
        ("profiles/capture.nsys-rep", Some("profiles/gpu_kern_sum.csv"), Some("profiles/cuda_api_sum.csv"))
    );
    assert_eq!(
        (kp.duration_s, kp.vllm_pid, kp.sidecar_image.as_deref()),
        (5.0, Some(4242), Some(DEFAULT_SIDECAR_IMAGE))
    );
    let top = kp.top_kernels.clone().unwrap();
    assert!(!top.is_empty() && top[0].rank == 1 && top[0].instances > 0, "{top:?}");
    assert_eq!(std::fs::read(b.join("profiles/gpu_kern_sum.csv")).unwrap(), std::fs::read(&csv).unwrap());
    let text = std::fs::read_to_string(b.join(BUNDLE_FILE)).unwrap();
    assert!(text.starts_with("{\"run_id\": \"x\",\n \"n\": 1.0, \"kernel_profile\": {\"keep\": [1 ,2]"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let k = &v["kernel_profile"];
    for f in [
        "captured_at",
        "nsys_rep_path",
        "summary_csv_path",
        "duration_s",
        "vllm_pid",
        "sidecar_image",
        "method",
        "top_kernels",
    ] {
        assert!(!k[f].is_null(), "{f}: {k}");
    }
    assert_eq!(k["top_kernels"][0]["name"], top[0].name.as_str());
    assert_eq!(k["summary_csv_path"], "profiles/gpu_kern_sum.csv");
    assert_eq!(k["stats"]["cuda_gpu_kern_sum"]["source"], "profiles/gpu_kern_sum.csv");
    assert_eq!(v["pod_attach"]["kernel_profile"]["vllm_pid"], 4242);
    // a file whose bytes do not match its sha256 is not put in the bundle
    let mut doc2 = doc.clone();
    doc2.files[0].sha256 = "0".repeat(64);
    assert!(write_bundle(&b, &mut doc2, &o).unwrap_err().message.contains("deleted"));
}

/// A30: the engine's nsys must run with --cuda-graph-trace=node; refused before the capture otherwise, naming
/// the flag (the seed's gotcha 1).
#[test]
fn graph_trace_node_is_required_before_the_capture() {
    let ok = pe(
        7,
        1,
        false,
        "/opt/nsys profile --trace=cuda,nvtx --cuda-graph-trace=node --capture-range=cudaProfilerApi python3 x",
    );
    assert_eq!(check_graph_trace(&ok).unwrap(), "node");
    let spaced = pe(7, 1, false, "nsys launch --cuda-graph-trace node:host-and-device --session-new=s python3 x");
    assert_eq!(check_graph_trace(&spaced).unwrap(), "node:host-and-device");
    for cmd in [
        "nsys profile --trace=cuda --capture-range=cudaProfilerApi --capture-range-end=stop python3 x",
        "nsys profile --cuda-graph-trace=graph --capture-range=cudaProfilerApi python3 x",
    ] {
        let e = check_graph_trace(&pe(9, 1, false, cmd)).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message.contains("--cuda-graph-trace=node") && e.message.contains("before the capture"),
            "{}",
            e.message
        );
        assert!(e.message.contains("nsys (PID 9)"), "{}", e.message);
    }
}

/// A47: no libcupti beside nsys's injection library, an unreadable folder, or only a CUPTI older than the
/// driver's CUDA major: each a finding. The folder listing is the real nsys 2023.4.4 install's when present.
#[test]
fn cupti_missing_or_too_old_is_a_finding() {
    let dir = "/opt/nsys/target-linux-x64";
    let found = parse_cupti_check(
        Some(dir),
        "file\tlibcupti.so.11.7\nfile\tlibcupti.so.12.4\nmapped\t/opt/nsys/target-linux-x64/libcupti.so.12.4\n",
    );
    assert_eq!(found.files.len(), 2);
    assert_eq!(found.mapped, vec!["/opt/nsys/target-linux-x64/libcupti.so.12.4"]);
    assert!(cupti_findings(&found, Some(12)).is_empty());
    let old = cupti_findings(&found, Some(13));
    assert!(old.len() == 1 && old[0].contains("12.x, older than the driver's CUDA 13"), "{old:?}");
    let none = cupti_findings(&parse_cupti_check(Some(dir), ""), Some(13));
    assert!(none.len() == 1 && none[0].contains("no libcupti.so* beside nsys's injection library"), "{none:?}");
    let gone = cupti_findings(&parse_cupti_check(Some(dir), "dir\tmissing\n"), None);
    assert!(gone.len() == 1 && gone[0].contains("cannot be read"), "{gone:?}");
    assert!(cupti_findings(&parse_cupti_check(None, ""), Some(13)).is_empty(), "no injection: nothing to check");
    assert_eq!(cupti_major("libcupti.so.2025.3.1"), Some(2025));
    assert_eq!(cupti_major("/x/libcupti.so"), None);
    // the script runs as written on this machine: the real nsys 2023.4.4 folder through /proc/self/root
    let real = std::path::Path::new(
        "/root/.cache/nsyskit/nsys-2023.4/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64",
    );
    if real.is_dir() {
        let out = std::process::Command::new("sh")
            .args(&argv_cupti_check("self", &real.display().to_string())[1..])
            .output()
            .unwrap();
        let c = parse_cupti_check(Some(&real.display().to_string()), &String::from_utf8_lossy(&out.stdout));
        assert!(!c.dir_missing && c.files.iter().any(|f| f == "libcupti.so.11.7"), "{c:?}");
        // nsys 2023.4.4 ships CUPTI up to 11.x/12.x: a CUDA 13 driver is a finding
        assert_eq!(cupti_findings(&c, Some(13)).len(), 1, "{c:?}");
    }
}

/// A53: the driver from `nvidia-smi --version` (the H200's, fixtures/nvidia-smi/version.txt) or the kernel
/// module (fixtures/logs/driver-params_580.159.04.txt), against nsys; apt on CUDA 13 is a finding too.
#[test]
fn nsys_against_the_driver_before_the_capture() {
    let fx = |p: &str| std::fs::read_to_string(format!("{}/fixtures/{p}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let smi = parse_driver(&fx("nvidia-smi/version.txt"), "nvidia-smi --version").unwrap();
    assert_eq!(
        (smi.driver_version.as_deref(), smi.cuda_version.as_deref(), smi.cuda_major),
        (Some("580.159.04"), Some("13.0"), Some(13))
    );
    let module = parse_driver(&fx("logs/driver-params_580.159.04.txt"), "/proc/driver/nvidia/version").unwrap();
    assert_eq!(
        (module.driver_version.as_deref(), module.cuda_version.as_deref(), module.cuda_major),
        (Some("580.159.04"), None, Some(13))
    );
    assert_eq!(cuda_major_for_driver("550.54.15"), Some(12));
    assert_eq!(cuda_major_for_driver("418.1"), None);
    assert!(parse_driver("nvidia-smi: command not found", "x").is_none());
    let old = driver_findings("nsys in container s", Some("2023.4.4.54-234433681190v0"), &smi, false);
    assert!(old.len() == 1 && old[0].contains("older than 2025.3") && old[0].contains("driver 580.159.04"), "{old:?}");
    assert!(driver_findings("nsys", Some("2025.3.1.90"), &smi, false).is_empty());
    let apt = driver_findings("nsys", Some("2025.3.1.90"), &module, true);
    assert!(apt.len() == 1 && apt[0].contains("--install-nsys apt on a CUDA 13"), "{apt:?}");
    assert_eq!(driver_findings("nsys", None, &smi, false).len(), 1);
    assert!(
        driver_findings("nsys", Some("2023.4.4"), &DriverInfo::default(), true).is_empty(),
        "unknown driver: nothing"
    );
}

/// A58: the size gate comes before `nsys stats` in the plan, and refuses a report under the threshold.
#[test]
fn size_gate_before_stats() {
    assert!(size_gate(214_193, 10_000_000).unwrap_err().contains("nsys stats not run"));
    assert!(size_gate(10_000_000, 10_000_000).is_ok());
    let o = opts();
    assert_eq!(o.size_gate_bytes(), 10_000_000);
    let argvs: Vec<Vec<String>> = plan(&o)
        .into_iter()
        .filter_map(|s| match s {
            PlanStep::Exec { argv, .. } => Some(argv),
            _ => None,
        })
        .collect();
    let stat = argvs.iter().position(|a| a[0] == "stat" && a[2] == "%s").expect("size gate step");
    let stats = argvs.iter().position(|a| a.get(1).map(String::as_str) == Some("stats")).expect("stats step");
    let export = argvs.iter().position(|a| a.get(1).map(String::as_str) == Some("export")).expect("export step");
    assert!(export < stat && stat < stats, "export {export}, size gate {stat}, stats {stats}");
}

/// A86: the plan says, before any run, that a `stop` engine needs a restart for each further capture.
#[test]
fn plan_says_stop_needs_a_restart_per_capture() {
    let d = dry_run(&opts()).unwrap();
    assert!(d.warnings.iter().any(|w| w.contains("each further capture needs an engine restart")), "{:?}", d.warnings);
    assert!(d.plan.iter().any(
        |s| matches!(s, PlanStep::Http { path, why, .. } if path == "/start_profile" && why.contains("engine restart"))
    ));
    let mut s = opts();
    s.strategy = Strategy::Session;
    assert!(dry_run(&s).unwrap().warnings.iter().all(|w| !w.contains("engine restart")));
}

/// A52: the copied nsys of the GB300 path needs a pinned source image and the launch change, both recorded.
#[test]
fn copied_nsys_is_pinned_and_recorded() {
    let digest = "sha256:".to_string() + &"ab".repeat(32);
    let mut o = opts();
    o.nsys_source_image = Some(format!("nvcr.io/nvidia/cuda:13.0.1-devel-ubuntu24.04@{digest}"));
    o.nsys_launch_change =
        Some("wrapper copies /opt/nvidia/nsight-systems/2026.1 into /nsys; engine runs /nsys/bin/nsys".into());
    o.validate().unwrap();
    let c = o.copied_nsys(Some("2026.1.1.100".into())).unwrap();
    assert_eq!((c.source_image_digest.as_str(), c.version.as_deref()), (digest.as_str(), Some("2026.1.1.100")));
    assert!(c.launch_change.contains("/nsys/bin/nsys"));
    let mut unpinned = o.clone();
    unpinned.nsys_source_image = Some("nvcr.io/nvidia/cuda:13.0.1-devel-ubuntu24.04".into());
    let e = unpinned.validate().unwrap_err();
    assert!(e.message.contains("not pinned by digest") && e.exit_code() == 2, "{}", e.message);
    let mut alone = o.clone();
    alone.nsys_launch_change = None;
    assert!(alone.validate().unwrap_err().message.contains("needs --nsys-launch-change"));
    assert!(opts().copied_nsys(None).is_none());
}

/// Step 3 of issue 39 (A13/A43, B28/B29/B34): the workload flags and the client command, recorded as
/// serve-capture records them; a flag that disagrees with the client command is exit 2; no question warns.
#[test]
fn workload_is_recorded_like_serve_capture() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("question.txt");
    std::fs::write(&q, "Where does c=64 decode time go: is the fused MoE kernel > 30% of GPU time?\n").unwrap();
    let f = Flags {
        pod: Some("vllm-0".into()),
        question: Some(q.display().to_string()),
        client_cmd: Some("vllm bench serve --model m --request-rate 4.0 --max-concurrency=64 --seed 42".into()),
        concurrency: Some(64),
        ..Flags::default()
    };
    let o = options(&f).unwrap();
    let w = &o.workload;
    assert_eq!(
        w.question.as_deref(),
        Some("Where does c=64 decode time go: is the fused MoE kernel > 30% of GPU time?")
    );
    assert_eq!(
        (w.request_rate.as_deref(), w.concurrency, w.seed_policy.as_deref()),
        (Some("4"), Some(64), Some("fixed:42"))
    );
    assert_eq!(w.sources["concurrency"], "--concurrency = load command --max-concurrency");
    assert!(w.client_command.as_deref().unwrap().starts_with("vllm bench serve"));
    assert!(dry_run(&o).unwrap().warnings.iter().all(|x| !x.contains("--question")));
    let e = options(&Flags { concurrency: Some(8), ..f.clone() }).unwrap_err();
    assert!(
        e.exit_code() == 2 && e.message.contains("--concurrency 8") && e.message.contains("--max-concurrency"),
        "{}",
        e.message
    );
    let none = options(&Flags { pod: Some("vllm-0".into()), ..Flags::default() }).unwrap();
    assert!(none.workload.question.is_none());
    assert!(dry_run(&none).unwrap().warnings.iter().any(|x| x.contains("no --question FILE")));
    let missing = options(&Flags { question: Some(dir.path().join("nope").display().to_string()), ..f });
    assert_eq!(missing.unwrap_err().exit_code(), 2);
}
