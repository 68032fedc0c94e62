//! Provenance helpers: UTC time, hostname, git state, env redaction, splitting a flag string.

use std::path::Path;
use std::process::Command;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::{Error, Result};

/// RFC 3339 UTC with seconds (`2026-11-29T23:01:02Z`) of a system time.
pub use crate::contract::rfc3339_utc as rfc3339;

/// This machine's hostname (`gethostname`), `None` when it cannot be read.
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer outlives the call and its length is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned()).filter(|s| !s.is_empty())
}

/// Secret words in a flag, header or variable name, found anywhere in it (any case): `HF_TOKEN`, `--api-key`,
/// `WANDB_PASSWD`, `--credentials`, `--bearer`, `Authorization`.
const SECRET_WORDS: [&str; 8] = ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "AUTH", "CREDENTIAL", "BEARER"];
/// Short secret words that count only as a whole part of a name (`--pass`, `DB_PW`, `MYSQL_PWD`), never inside
/// another word (`BYPASS`, `COMPASS`).
const SECRET_PARTS: [&str; 3] = ["PASS", "PW", "PWD"];

/// Does a flag, header or environment name hold a secret? Any case; it contains TOKEN, SECRET, PASSWORD,
/// PASSWD, KEY, AUTH (AUTHORIZATION), CREDENTIAL(S) or BEARER, or one of its `-`/`_`-separated parts is PASS, PW
/// or PWD.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    SECRET_WORDS.iter().any(|s| k.contains(s))
        || k.split(|c: char| !c.is_ascii_alphanumeric()).any(|p| SECRET_PARTS.contains(&p))
}

/// What replaces a secret value.
pub const REDACTED: &str = "<redacted>";

/// Redact secrets in a command line with the rule of [`redact_words`].
pub fn redact_command(cmd: &str) -> (String, bool) {
    let (words, secrets) = redact_words(&split_words(cmd));
    if secrets.is_empty() {
        return (cmd.to_string(), false);
    }
    (words.iter().map(|w| if w.contains(REDACTED) { w.clone() } else { quote(w) }).collect::<Vec<_>>().join(" "), true)
}

/// The flag name of a word (`--api-key` → `api-key`, `-p` → `p`); `None` for a word that is not a flag (`-`,
/// `--`, `-5`).
fn flag_name(w: &str) -> Option<&str> {
    let name = w.strip_prefix('-')?.trim_start_matches('-');
    name.starts_with(|c: char| c.is_ascii_alphabetic()).then_some(name)
}

/// Is the flag word a secret flag whose value is the next word: a secret name ([`is_secret_key`]) or `-p`
/// (mysql's password).
fn is_secret_flag(w: &str) -> bool {
    flag_name(w).is_some_and(|n| n == "p" || (!n.contains(['=', ':', ' ']) && is_secret_key(n)))
}

/// An authentication scheme word that precedes the credential (`Authorization: Bearer TOKEN`).
fn is_auth_scheme(w: &str) -> bool {
    ["bearer", "basic", "token", "digest"].iter().any(|s| w.eq_ignore_ascii_case(s))
}

/// `NAME:VALUE` or `NAME: VALUE` with a header-like NAME (letters, digits, `-`, `_`).
fn header(w: &str) -> Option<(&str, &str)> {
    let (name, value) = w.split_once(':')?;
    (!name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !value.starts_with("//"))
    .then_some((name, value))
}

/// The one redaction rule, on an argv (and on `NAME=VALUE` environment entries, as one word each). Redacted,
/// with each value removed returned as a secret (for [`Redactor`]):
///
/// * the value of a secret flag ([`is_secret_key`]: `--api-key`, `--passwd`, `--credentials`, `--bearer`,
///   `--auth-token`, …, and `-p`), as `--flag=VALUE` or as the next word (`--flag VALUE`; a next word that is a
///   flag itself is not a value);
/// * `NAME=VALUE` words whose NAME is a secret (`HF_TOKEN=…`, `WANDB_PASSWD=…`);
/// * header values of a secret header name (`Authorization: Bearer …`, `X-Api-Key: …`), quoted as one word or
///   split (`Authorization:` `Bearer` `TOKEN`), and the word after `Bearer`/`Basic`;
/// * curl's `-u/--user USER:PASSWORD`: the password;
/// * in any word, the rules of [`redact_text_patterns`]: `scheme://user:PASSWORD@host` and `Bearer TOKEN`
///   (`DB_URL=mysql://u:pw@db` → `DB_URL=mysql://u:<redacted>@db`).
pub fn redact_words(words: &[String]) -> (Vec<String>, Vec<String>) {
    let mut out: Vec<String> = Vec::new();
    let mut secrets = Vec::new();
    let mut redact_next = false;
    let mut user_next = false;
    for w in words {
        if redact_next {
            if is_auth_scheme(w) {
                out.push(w.clone());
                continue;
            }
            redact_next = false;
            if !(w.len() > 1 && flag_name(w).is_some()) {
                out.push(REDACTED.into());
                secrets.push(w.clone());
                continue;
            }
        }
        if user_next {
            user_next = false;
            if let Some((u, pw)) = w.split_once(':') {
                out.push(format!("{u}:{REDACTED}"));
                secrets.push(pw.to_string());
                continue;
            }
        }
        if let Some((k, v)) = w.split_once('=') {
            let name = k.trim_start_matches('-');
            if !name.is_empty() && !name.contains(char::is_whitespace) && is_secret_key(name) {
                out.push(format!("{k}={REDACTED}"));
                secrets.push(v.to_string());
                continue;
            }
            if matches!(flag_name(k), Some("user" | "u")) {
                if let Some((u, pw)) = v.split_once(':') {
                    out.push(format!("{k}={u}:{REDACTED}"));
                    secrets.push(pw.to_string());
                    continue;
                }
            }
        } else if is_secret_flag(w) {
            redact_next = true;
        } else if matches!(flag_name(w), Some("user" | "u")) {
            user_next = true;
        } else if is_auth_scheme(w) {
            redact_next = true;
        } else if let Some((name, value)) = header(w).filter(|(n, _)| is_secret_key(n)) {
            let value = value.trim();
            if value.is_empty() {
                redact_next = true;
                out.push(w.clone());
            } else {
                out.push(format!("{name}: {REDACTED}"));
                secrets.push(value.to_string());
                if let Some((scheme, cred)) = value.split_once(char::is_whitespace) {
                    if is_auth_scheme(scheme) {
                        secrets.push(cred.trim().to_string());
                    }
                }
            }
            continue;
        }
        let (text, found) = redact_text_patterns(w);
        secrets.extend(found);
        out.push(text);
    }
    (out, secrets)
}

/// ASCII case-insensitive find of `needle` in `hay` from byte `from`.
fn find_ci(hay: &str, needle: &str, from: usize) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    (from..h.len().saturating_sub(n.len() - 1)).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// The secrets any text can show without anyone having named them: the password of a URL's userinfo
/// (`scheme://user:PASSWORD@host`), an `Authorization:` header's value, and the credential after `Bearer` (and
/// after `Basic` when it looks like base64). Returns the redacted text and the values removed.
pub fn redact_text_patterns(text: &str) -> (String, Vec<String>) {
    let mut t = text.to_string();
    let mut found = Vec::new();
    // scheme://user:PASSWORD@host
    let mut from = 0;
    while let Some(i) = t[from..].find("://").map(|i| i + from) {
        let start = i + 3;
        let end = t[start..]
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || "\"'<>`".contains(c))
            .map_or(t.len(), |e| start + e);
        from = start;
        let Some(at) = t[start..end].rfind('@').map(|a| start + a) else { continue };
        let Some(colon) = t[start..at].find(':').map(|c| start + c + 1) else { continue };
        if colon < at && &t[colon..at] != REDACTED {
            found.push(t[colon..at].to_string());
            t.replace_range(colon..at, REDACTED);
            from = colon + REDACTED.len();
        }
    }
    // Authorization: VALUE (to the end of the line or a quote)
    let mut from = 0;
    while let Some(i) = find_ci(&t, "authorization:", from) {
        let mut s = i + "authorization:".len();
        s += t[s..].len() - t[s..].trim_start_matches([' ', '\t']).len();
        let e = t[s..].find(['\n', '\r', '"', '\'']).map_or(t.len(), |e| s + e);
        let v = t[s..e].trim_end();
        from = s;
        if !v.is_empty() && v != REDACTED && !v.starts_with(REDACTED) {
            let mut cred = v;
            if let Some((scheme, c)) = v.split_once(char::is_whitespace) {
                if is_auth_scheme(scheme) {
                    s += scheme.len() + (c.len() - c.trim_start().len()) + 1;
                    cred = c.trim_start();
                }
            }
            if cred != REDACTED && !cred.is_empty() {
                found.push(cred.to_string());
                let n = cred.len();
                t.replace_range(s..s + n, REDACTED);
                from = s + REDACTED.len();
            }
        }
    }
    // Bearer TOKEN, Basic BASE64
    for scheme in ["bearer", "basic"] {
        let mut from = 0;
        while let Some(i) = find_ci(&t, scheme, from) {
            from = i + scheme.len();
            let before_ok = i == 0 || !t.as_bytes()[i - 1].is_ascii_alphanumeric();
            let rest = &t[from..];
            let ws = rest.len() - rest.trim_start_matches([' ', '\t']).len();
            if !before_ok || ws == 0 {
                continue;
            }
            let s = from + ws;
            let e = t[s..].find(|c: char| c.is_whitespace() || "\"'`,;".contains(c)).map_or(t.len(), |e| s + e);
            let cred = &t[s..e];
            let looks = match scheme {
                "bearer" => !cred.is_empty(),
                _ => {
                    cred.len() >= 8
                        && cred.chars().all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c))
                        && (cred.chars().any(|c| c.is_ascii_digit() || "+/=".contains(c))
                            || cred.chars().skip(1).any(|c| c.is_ascii_uppercase()))
                }
            };
            if looks && cred != REDACTED {
                found.push(cred.to_string());
                t.replace_range(s..e, REDACTED);
                from = s + REDACTED.len();
            }
        }
    }
    (t, found)
}

/// Redaction for every document and message of a run: built from the argvs and `NAME=VALUE` environment the
/// run was given, it knows each secret value ([`redact_words`], on argv words and on each `NAME=VALUE`) and
/// replaces it wherever it appears — in an argv, a `/proc/PID/cmdline`, a log line quoted in a reason, a whole
/// JSON text —, and applies [`redact_text_patterns`] to all of it.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new<'a>(argvs: impl IntoIterator<Item = &'a [String]>, env: &[(String, String)]) -> Redactor {
        let mut secrets: Vec<String> = Vec::new();
        for a in argvs {
            secrets.extend(redact_words(a).1);
        }
        let env_words: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for w in env_words.chunks(1) {
            secrets.extend(redact_words(w).1);
        }
        // a value shorter than 4 characters would blank unrelated text (the rule still redacts it where it
        // stands); longest first so that no prefix of a secret is left behind
        secrets.retain(|s| s.chars().count() >= 4 && s != REDACTED);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }
    /// Whether there is any known secret value (the text patterns apply regardless).
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
    /// Every known secret value in `text` replaced by `<redacted>`, then [`redact_text_patterns`].
    pub fn text(&self, text: &str) -> String {
        let mut t = text.to_string();
        for s in &self.secrets {
            if t.contains(s.as_str()) {
                t = t.replace(s.as_str(), REDACTED);
            }
        }
        redact_text_patterns(&t).0
    }
    /// An argv with the rule of [`redact_words`] applied, then every known secret value replaced.
    pub fn argv(&self, argv: &[String]) -> Vec<String> {
        redact_words(argv).0.iter().map(|w| self.text(w)).collect()
    }
    /// A serialisable value as pretty JSON with [`Redactor::text`] applied to every string in it (keys
    /// included); numbers, booleans and the structure are never touched.
    pub fn json<T: Serialize>(&self, v: &T) -> String {
        fn walk(r: &Redactor, v: &mut serde_json::Value) {
            match v {
                serde_json::Value::String(s) => {
                    let t = r.text(s);
                    if t != *s {
                        *s = t;
                    }
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(|x| walk(r, x)),
                serde_json::Value::Object(m) => {
                    let old = std::mem::take(m);
                    for (k, mut x) in old {
                        walk(r, &mut x);
                        m.insert(r.text(&k), x);
                    }
                }
                _ => {}
            }
        }
        let mut value = serde_json::to_value(v).expect("serialises");
        walk(self, &mut value);
        serde_json::to_string_pretty(&value).expect("serialises")
    }
}

fn quote(w: &str) -> String {
    if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c)) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// Split a flag or command string into words like a POSIX shell does for quotes and backslashes (no
/// expansion): `--trace=cuda,nvtx -o 'my rep'` → `["--trace=cuda,nvtx", "-o", "my rep"]`.
pub fn split_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    cur.push(d);
                }
            }
            '"' => {
                in_word = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = chars.next() {
                                cur.push(e);
                            }
                        }
                        d => cur.push(d),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(e) = chars.next() {
                    cur.push(e);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// The engine source tree's git state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RepoState {
    /// The folder given (`--repo`).
    pub path: String,
    /// The repository's top-level folder.
    pub toplevel: String,
    /// `HEAD` commit (full hash).
    pub revision: String,
    /// Current branch, `null` on a detached HEAD.
    pub branch: Option<String>,
    /// Uncommitted changes to tracked files or untracked (not ignored) files exist.
    pub dirty: bool,
    /// `git status --porcelain` lines (at most 100), e.g. ` M src/x.py`, `?? new.txt`.
    pub changes: Vec<String>,
    /// The number of such lines in all.
    pub changed_files: usize,
}

fn git(dir: &Path, args: &[&str]) -> std::result::Result<String, String> {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        return Err(format!("`git {}` failed: {}", args.join(" "), err.trim()));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Read revision and dirty state of the git repository at `dir` with the `git` CLI (no lock taken).
pub fn repo_state(dir: &Path) -> Result<RepoState> {
    let name = dir.display().to_string();
    if !dir.is_dir() {
        return Err(Error::input(format!("{name}: not a folder")).with_arg("--repo"));
    }
    let fail = |e: String| Error::input(format!("{name}: {e}")).with_arg("--repo");
    let toplevel = git(dir, &["rev-parse", "--show-toplevel"]).map_err(fail)?.trim().to_string();
    let revision = git(dir, &["rev-parse", "--verify", "HEAD"])
        .map_err(|e| fail(format!("no commit to record ({e})")))?
        .trim()
        .to_string();
    let branch = git(dir, &["symbolic-ref", "--quiet", "--short", "HEAD"])
        .ok()
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty());
    let status = git(dir, &["status", "--porcelain=v1", "--untracked-files=normal"]).map_err(fail)?;
    let lines: Vec<String> = status.lines().filter(|l| !l.is_empty()).map(|l| l.to_string()).collect();
    Ok(RepoState {
        path: name,
        toplevel,
        revision,
        branch,
        dirty: !lines.is_empty(),
        changed_files: lines.len(),
        changes: lines.into_iter().take(100).collect(),
    })
}

// serve-capture's launcher contract, recorded in provenance: the types live with the record.

/// The flags a server command must carry, and why: `--require-argv` as given, then the ones `--engine` and the
/// window imply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArgvRequirement {
    /// The flag (`--alignment-nvtx-ranges`), or flag and value (`--profiler-config.profiler=cuda`: also met
    /// by the two words `--profiler-config.profiler cuda`).
    pub flag: String,
    /// `--require-argv`, or what implied it (`--engine sglang`, `--engine vllm with --capture-range cudaProfilerApi`).
    pub why: String,
}

/// The launcher contract that was checked, recorded in serve-capture.json and provenance.json.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LauncherCheck {
    /// `--engine` (`sglang`, `vllm`), null when not given.
    pub engine: Option<String>,
    pub required: Vec<ArgvRequirement>,
    /// The server argv that was checked (redacted as every argv of the run).
    pub checked_argv: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn times() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(1_796_000_000)), "2026-11-30T00:53:20Z");
    }

    #[test]
    fn secrets() {
        for k in
            ["HF_TOKEN", "hf_token", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "AuthHeader", "keyring"]
        {
            assert!(is_secret_key(k), "{k}");
        }
        for k in ["CUDA_VISIBLE_DEVICES", "VLLM_USE_V1", "PATH"] {
            assert!(!is_secret_key(k), "{k}");
        }
        let (c, r) = redact_command("HF_TOKEN=hf_abc vllm serve m --api-key sk-1 --port 8000 --auth-token=x");
        assert!(r);
        assert_eq!(c, "HF_TOKEN=<redacted> vllm serve m --api-key <redacted> --port 8000 --auth-token=<redacted>");
        assert_eq!(redact_command("vllm serve 'my model'"), ("vllm serve 'my model'".to_string(), false));
        let argv: Vec<String> =
            ["srv", "--api-key", "sk-live-1234", "--token=abcd1234", "OPENAI_API_KEY=k-9999", "--port", "80"]
                .map(String::from)
                .into();
        let r = Redactor::new(
            [argv.as_slice()],
            &[("HF_TOKEN".into(), "hf_secret_1".into()), ("PORT".into(), "8000".into())],
        );
        assert_eq!(
            r.argv(&argv),
            ["srv", "--api-key", "<redacted>", "--token=<redacted>", "OPENAI_API_KEY=<redacted>", "--port", "80"]
        );
        assert_eq!(
            r.text("log: key sk-live-1234 and hf_secret_1 on 8000"),
            "log: key <redacted> and <redacted> on 8000"
        );
        assert!(!r.json(&serde_json::json!({"a": "x\"sk-live-1234"})).contains("sk-live"));
    }

    /// Issue 42: each form of the one rule, on an argv and on free text.
    #[test]
    fn every_secret_form() {
        let w = |s: &[&str]| -> Vec<String> { s.iter().map(|x| x.to_string()).collect() };
        let cases: [(&[&str], &[&str], &str); 12] = [
            (&["--passwd", "pw1x"], &["--passwd", REDACTED], "pw1x"),
            (&["--pass=pw2x"], &["--pass=<redacted>"], "pw2x"),
            (&["--credentials", "c3xx"], &["--credentials", REDACTED], "c3xx"),
            (&["--bearer", "b4xx"], &["--bearer", REDACTED], "b4xx"),
            (&["-p", "p5xx"], &["-p", REDACTED], "p5xx"),
            (&["--db-pw", "p6xx"], &["--db-pw", REDACTED], "p6xx"),
            (&["-H", "Authorization: Bearer t7xx"], &["-H", "Authorization: <redacted>"], "t7xx"),
            (&["-H", "Authorization:", "Bearer", "t8xx"], &["-H", "Authorization:", "Bearer", REDACTED], "t8xx"),
            (&["https://u:pw9x@h/x"], &["https://u:<redacted>@h/x"], "pw9x"),
            (&["DB_URL=mysql://u:p10x@db:3306/a"], &["DB_URL=mysql://u:<redacted>@db:3306/a"], "p10x"),
            (&["WANDB_PASSWD=p11x"], &["WANDB_PASSWD=<redacted>"], "p11x"),
            (&["-u", "me:p12x"], &["-u", "me:<redacted>"], "p12x"),
        ];
        for (argv, want, secret) in cases {
            let (got, secrets) = redact_words(&w(argv));
            assert_eq!(got, w(want), "{argv:?}");
            assert!(secrets.iter().any(|s| s.contains(secret)), "{argv:?}: {secrets:?}");
        }
        // a secret flag without a value does not swallow the next flag
        assert_eq!(redact_words(&w(&["--no-auth", "--port", "80"])).0, w(&["--no-auth", "--port", "80"]));
        // not secrets
        for k in ["BYPASS_CACHE", "COMPASS", "--passes", "PATH"] {
            assert!(!is_secret_key(k), "{k}");
        }
        for k in ["DB_PW", "MYSQL_PWD", "--pass", "x-api-key", "Proxy-Authorization", "CREDENTIALS", "WANDB_PASSWD"] {
            assert!(is_secret_key(k), "{k}");
        }
        // free text: URL userinfo, Authorization headers, Bearer and Basic credentials
        let (t, f) = redact_text_patterns("GET https://a:b9c@h/ with 'Authorization: Bearer zz99' ok");
        assert_eq!(t, "GET https://a:<redacted>@h/ with 'Authorization: Bearer <redacted>' ok");
        assert_eq!(f, ["b9c", "zz99"]);
        assert_eq!(redact_text_patterns("token Bearer abc.def").0, "token Bearer <redacted>");
        assert_eq!(redact_text_patterns("Basic dXNlcjpwYXNz").0, "Basic <redacted>");
        assert_eq!(redact_text_patterns("a basic check failed").0, "a basic check failed");
        assert_eq!(redact_text_patterns("http://h:8000/x ssh://git@h").0, "http://h:8000/x ssh://git@h");
        // the document keeps its numbers and structure, whatever the secret is
        let r = Redactor::new([w(&["--api-key", "true", "--token", "8000"]).as_slice()], &[]);
        let j: serde_json::Value =
            serde_json::from_str(&r.json(&serde_json::json!({"port": 8000, "ok": true, "url": "http://h:8000/"})))
                .unwrap();
        assert_eq!(j, serde_json::json!({"port": 8000, "ok": true, "url": "http://h:<redacted>/"}));
    }

    #[test]
    fn words() {
        assert_eq!(
            split_words(r#"--trace=cuda,nvtx -o 'my rep' "a \"b\"" c\ d"#),
            ["--trace=cuda,nvtx", "-o", "my rep", "a \"b\"", "c d"]
        );
        assert!(split_words("   ").is_empty());
        assert_eq!(split_words("''"), [""]);
    }
}
