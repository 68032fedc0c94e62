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

/// Does an environment key hold a secret (`TOKEN`, `SECRET`, `PASSWORD`, `KEY`, `AUTH`, any case)?
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    ["TOKEN", "SECRET", "PASSWORD", "KEY", "AUTH"].iter().any(|s| k.contains(s))
}

/// What replaces a secret value.
pub const REDACTED: &str = "<redacted>";

/// Redact secrets in a command line: `KEY=value` words whose key is a secret (`HF_TOKEN=hf_x` →
/// `HF_TOKEN=<redacted>`), and the value of flags whose name is one (`--api-key X`, `--api-key=X`).
pub fn redact_command(cmd: &str) -> (String, bool) {
    let (words, secrets) = redact_words(&split_words(cmd));
    if secrets.is_empty() {
        return (cmd.to_string(), false);
    }
    (words.iter().map(|w| if w.ends_with(REDACTED) { w.clone() } else { quote(w) }).collect::<Vec<_>>().join(" "), true)
}

/// The one redaction rule, on an argv: `KEY=value` words whose key is a secret ([`is_secret_key`]) become
/// `KEY=<redacted>`, and so do `--secret-flag=value`; the word after a `--secret-flag` becomes `<redacted>`.
/// Returns the redacted words and the secret values removed (for [`Redactor`]).
pub fn redact_words(words: &[String]) -> (Vec<String>, Vec<String>) {
    let mut out: Vec<String> = Vec::new();
    let mut secrets = Vec::new();
    let mut redact_next = false;
    for w in words {
        if redact_next {
            out.push(REDACTED.into());
            secrets.push(w.clone());
            redact_next = false;
            continue;
        }
        if let Some((k, v)) = w.split_once('=') {
            let name = k.trim_start_matches('-');
            if !name.is_empty() && !name.contains(char::is_whitespace) && is_secret_key(&name.replace('-', "_")) {
                out.push(format!("{k}={REDACTED}"));
                secrets.push(v.to_string());
                continue;
            }
        } else if w.starts_with("--") && is_secret_key(&w[2..].replace('-', "_")) {
            redact_next = true;
        }
        out.push(w.clone());
    }
    (out, secrets)
}

/// Redaction for every document and message of a run: built from the argvs and `NAME=VALUE` environment the
/// run was given, it knows each secret value ([`redact_words`], [`is_secret_key`] on env names) and replaces it
/// wherever it appears — in an argv, a `/proc/PID/cmdline`, a log line quoted in a reason, a whole JSON text.
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
        for (k, v) in env {
            if is_secret_key(k) {
                secrets.push(v.clone());
            }
        }
        // a value shorter than 4 characters would blank unrelated text; longest first so that no prefix of a
        // secret is left behind
        secrets.retain(|s| s.chars().count() >= 4 && s != REDACTED);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }
    /// Whether there is anything to redact.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
    /// Every secret value in `text` replaced by `<redacted>`.
    pub fn text(&self, text: &str) -> String {
        let mut t = text.to_string();
        for s in &self.secrets {
            if t.contains(s.as_str()) {
                t = t.replace(s.as_str(), REDACTED);
            }
        }
        t
    }
    /// An argv with the rule of [`redact_words`] applied, then every known secret value replaced.
    pub fn argv(&self, argv: &[String]) -> Vec<String> {
        redact_words(argv).0.iter().map(|w| self.text(w)).collect()
    }
    /// A serialisable value as pretty JSON with every secret value replaced (JSON-escaped forms included).
    pub fn json<T: Serialize>(&self, v: &T) -> String {
        let text = serde_json::to_string_pretty(v).expect("serialises");
        let mut t = self.text(&text);
        for s in &self.secrets {
            let esc = serde_json::to_string(s).expect("a string serialises");
            let esc = &esc[1..esc.len() - 1];
            if esc != s && t.contains(esc) {
                t = t.replace(esc, REDACTED);
            }
        }
        t
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
