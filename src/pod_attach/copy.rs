//! The copy-out: sizes, digests, the streaming tar check ([`TarSink`]), verified local copies.

use super::*;

/// Lowercase hex sha256 of bytes.
pub fn sha256_hex(data: &[u8]) -> String {
    let d = Sha256::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parse `sha256sum` output into `basename → digest`.
pub fn parse_sha256sum(text: &str) -> Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let (h, p) = l
            .split_once("  ")
            .or_else(|| l.split_once(" *"))
            .ok_or_else(|| Error::input(format!("sha256sum output line {}: {l:?}", i + 1)))?;
        if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::input(format!("sha256sum output line {}: not a sha256: {l:?}", i + 1)));
        }
        let name = p.rsplit('/').next().unwrap_or(p).to_string();
        m.insert(name, h.to_ascii_lowercase());
    }
    Ok(m)
}

/// Parse `stat -c '%s\t%n'` output into `basename → size`.
pub fn parse_sizes(text: &str) -> Result<BTreeMap<String, u64>> {
    let mut m = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let (sz, p) = l.split_once('\t').ok_or_else(|| Error::input(format!("stat output line {}: {l:?}", i + 1)))?;
        let sz = sz.parse().map_err(|_| Error::input(format!("stat output line {}: bad size in {l:?}", i + 1)))?;
        m.insert(p.rsplit('/').next().unwrap_or(p).to_string(), sz);
    }
    Ok(m)
}

/// Names of the files to copy out: the report, its SQLite export and the stats CSVs. Anything else in the
/// work folder is left behind; names that are not plain file names are rejected.
pub fn files_to_copy(listing: &str, capture_name: &str) -> Result<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for l in listing.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if l.contains('/') || l == ".." || l == "." {
            return Err(Error::input(format!("work folder listing: {l:?} is not a plain file name")));
        }
        let keep =
            l.starts_with(capture_name) && (l.ends_with(".nsys-rep") || l.ends_with(".sqlite") || l.ends_with(".csv"));
        if keep {
            names.push(l.to_string());
        }
    }
    names.sort();
    if !names.iter().any(|n| n.ends_with(".nsys-rep")) {
        return Err(Error::env(format!(
            "no {capture_name}.nsys-rep in the work folder (listing: {:?})",
            listing.lines().collect::<Vec<_>>()
        )));
    }
    Ok(names)
}

/// A file pod-attach copied out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CopiedFile {
    pub name: String,
    /// Local path.
    pub path: String,
    pub size: u64,
    /// sha256 computed locally; equal to the one `sha256sum` printed in the container.
    pub sha256: String,
}

/// What the container said about one file before the copy: its size (`stat`) and sha256 (`sha256sum`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub size: u64,
    pub sha256: String,
}

/// The expected files of a copy-out, from the container's `stat` and `sha256sum` listings: every name must be in
/// both; `max_copy_bytes` refuses a total over it before any byte is copied.
pub fn expected_files(
    names: &[String],
    sizes: &BTreeMap<String, u64>,
    sums: &BTreeMap<String, String>,
    max_copy_bytes: Option<u64>,
) -> Result<BTreeMap<String, Expected>> {
    let mut m = BTreeMap::new();
    for n in names {
        let size = *sizes.get(n).ok_or_else(|| Error::env(format!("copy-out: no size for {n} from the container")))?;
        let sha256 =
            sums.get(n).ok_or_else(|| Error::env(format!("copy-out: no sha256 for {n} from the container")))?.clone();
        m.insert(n.clone(), Expected { size, sha256 });
    }
    let total: u64 = m.values().map(|e| e.size).sum();
    if let Some(cap) = max_copy_bytes {
        if total > cap {
            return Err(Error::env(format!(
                "copy-out refused: the container's files total {total} bytes ({}), over --max-copy-bytes {cap}",
                m.iter().map(|(n, e)| format!("{n} {}", e.size)).collect::<Vec<_>>().join(", ")
            ))
            .with_arg("--max-copy-bytes"));
        }
    }
    Ok(m)
}

/// Most bytes a tar stream of these files can take: headers, bodies rounded to 512, the end blocks and tar's
/// padding to its 10240-byte record.
pub fn tar_stream_cap(expected: &BTreeMap<String, Expected>) -> u64 {
    let body: u64 = expected.values().map(|e| 512 + e.size.div_ceil(512) * 512).sum();
    (body + 1024).div_ceil(10240) * 10240
}

#[derive(Debug)]
enum TarState {
    Header,
    Body,
    Pad,
    End,
}

struct CurFile {
    name: String,
    file: std::io::BufWriter<std::fs::File>,
    hasher: Sha256,
    remaining: u64,
    size: u64,
}

/// Checks and writes a tar stream as it arrives (no file is held in memory): only regular files, each listed
/// in `expected` exactly once, with a plain name (no `/`, so no absolute path and no `..`), the expected size
/// (checked at the header, before its body is read) and the expected sha256 of the bytes written; header
/// checksums; nothing but zeros after the end-of-archive; at most `cap` bytes in all. Files go to a fresh
/// staging folder inside `dest` (created with `mkdir`, files with `O_CREAT|O_EXCL|O_NOFOLLOW`), and are renamed
/// into `dest` only by [`TarSink::commit`] when everything checked out: a rename replaces a symlink already in
/// `dest` instead of following it. On any error, or when dropped uncommitted, the staging folder and every file
/// in it are deleted.
pub struct TarSink {
    dest: PathBuf,
    staging: PathBuf,
    expected: BTreeMap<String, Expected>,
    cap: u64,
    received: u64,
    state: TarState,
    hdr: Vec<u8>,
    cur: Option<CurFile>,
    pad_left: u64,
    offset: u64,
    done: Vec<(String, u64, String)>,
    committed: bool,
    failed: Option<String>,
}

impl TarSink {
    /// `dest` is created when missing; `cap` None: [`tar_stream_cap`] of `expected`.
    pub fn new(dest: &Path, expected: BTreeMap<String, Expected>, cap: Option<u64>) -> Result<TarSink> {
        std::fs::create_dir_all(dest)
            .map_err(|e| Error::env(format!("{}: {e}", dest.display())).with_arg("--out-dir"))?;
        let id = format!(
            "{:x}{:x}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
        );
        let staging = dest.join(format!(".nsyskit-copy-{id}"));
        std::fs::create_dir(&staging)
            .map_err(|e| Error::env(format!("{}: {e}", staging.display())).with_arg("--out-dir"))?;
        let auto = tar_stream_cap(&expected);
        Ok(TarSink {
            dest: dest.to_path_buf(),
            staging,
            cap: cap.map(|c| c.min(auto)).unwrap_or(auto),
            expected,
            received: 0,
            state: TarState::Header,
            hdr: Vec::with_capacity(512),
            cur: None,
            pad_left: 0,
            offset: 0,
            done: Vec::new(),
            committed: false,
            failed: None,
        })
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    fn fail(&mut self, msg: String) -> Error {
        self.cur = None;
        let _ = std::fs::remove_dir_all(&self.staging);
        self.failed = Some(msg.clone());
        Error::input(msg)
    }

    /// The next piece of the stream.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<()> {
        if let Some(m) = &self.failed {
            return Err(Error::input(m.clone()));
        }
        self.received += data.len() as u64;
        if self.received > self.cap {
            let msg = format!(
                "tar stream runs past {} bytes (the listed files' sizes plus tar's headers and padding{}): stopped, nothing kept",
                self.cap,
                if self.cap < tar_stream_cap(&self.expected) { ", capped by --max-copy-bytes" } else { "" }
            );
            return Err(self.fail(msg));
        }
        while !data.is_empty() {
            match self.state {
                TarState::Header => {
                    let need = 512 - self.hdr.len();
                    let take = need.min(data.len());
                    self.hdr.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.hdr.len() == 512 {
                        let h = std::mem::take(&mut self.hdr);
                        if let Err(m) = self.header(&h) {
                            return Err(self.fail(m));
                        }
                        self.offset += 512;
                        self.hdr = Vec::with_capacity(512);
                    }
                }
                TarState::Body => {
                    let cur = self.cur.as_mut().expect("a file in Body");
                    let take = (cur.remaining.min(data.len() as u64)) as usize;
                    let chunk = &data[..take];
                    cur.hasher.update(chunk);
                    if let Err(e) = std::io::Write::write_all(&mut cur.file, chunk) {
                        let msg = format!("writing {}: {e}", cur.name);
                        return Err(self.fail(msg));
                    }
                    cur.remaining -= take as u64;
                    data = &data[take..];
                    self.offset += take as u64;
                    if cur.remaining == 0 {
                        if let Err(m) = self.finish_file() {
                            return Err(self.fail(m));
                        }
                    }
                }
                TarState::Pad => {
                    let take = (self.pad_left.min(data.len() as u64)) as usize;
                    self.pad_left -= take as u64;
                    data = &data[take..];
                    self.offset += take as u64;
                    if self.pad_left == 0 {
                        self.state = TarState::Header;
                    }
                }
                TarState::End => {
                    if data.iter().any(|&b| b != 0) {
                        let msg = format!(
                            "tar stream: data after the end-of-archive at byte {}: refused (unexpected extra content)",
                            self.offset
                        );
                        return Err(self.fail(msg));
                    }
                    self.offset += data.len() as u64;
                    data = &[];
                }
            }
        }
        Ok(())
    }

    fn header(&mut self, h: &[u8]) -> std::result::Result<(), String> {
        let off = self.offset;
        if h.iter().all(|&b| b == 0) {
            self.state = TarState::End;
            return Ok(());
        }
        let field = |a: usize, b: usize| -> String {
            let f = &h[a..b];
            let end = f.iter().position(|&c| c == 0).unwrap_or(f.len());
            String::from_utf8_lossy(&f[..end]).to_string()
        };
        let stored = u64::from_str_radix(field(148, 156).trim_matches(|c: char| c == ' ' || c == '\0'), 8)
            .map_err(|_| format!("tar header at byte {off}: bad checksum field"))?;
        let sum: u64 = h.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { 32 } else { b as u64 }).sum();
        if sum != stored {
            return Err(format!("tar header at byte {off}: checksum mismatch (stored {stored}, computed {sum})"));
        }
        let name = field(0, 100);
        let prefix = if &h[257..262] == b"ustar" { field(345, 500) } else { String::new() };
        let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let size_s = field(124, 136);
        let size = u64::from_str_radix(size_s.trim_matches(|c: char| c == ' ' || c == '\0'), 8)
            .map_err(|_| format!("tar entry {path:?} at byte {off}: bad size field {size_s:?}"))?;
        let typ = h[156];
        if path.starts_with('/') {
            return Err(format!("tar entry {path:?} at byte {off}: absolute path rejected"));
        }
        if Path::new(&path)
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_)))
        {
            return Err(format!("tar entry {path:?} at byte {off}: `..` component rejected"));
        }
        if !matches!(typ, b'0' | 0) {
            let what = match typ {
                b'1' => "a hard link",
                b'2' => "a symbolic link",
                b'5' => "a folder",
                b'3' | b'4' | b'6' => "a device or FIFO",
                _ => "not a regular file",
            };
            return Err(format!("tar entry {path:?} at byte {off}: type {:?} ({what}) rejected: only the listed regular files are copied", typ as char));
        }
        if path.contains('/') || path.is_empty() || path == "." {
            return Err(format!(
                "tar entry {path:?} at byte {off}: not a plain file name of the work folder: rejected"
            ));
        }
        let Some(exp) = self.expected.get(&path).cloned() else {
            return Err(format!(
                "tar entry {path:?} at byte {off}: unexpected extra file (asked for {}): rejected",
                self.expected.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        };
        if self.done.iter().any(|(n, _, _)| *n == path) {
            return Err(format!(
                "tar entry {path:?} at byte {off}: the same file a second time: rejected (nothing kept)"
            ));
        }
        if size != exp.size {
            return Err(format!("tar entry {path:?} at byte {off}: announces {size} bytes, the container's stat said {}: rejected before reading it", exp.size));
        }
        use std::os::unix::fs::OpenOptionsExt;
        let target = self.staging.join(&path);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&target)
            .map_err(|e| format!("{}: {e}", target.display()))?;
        self.cur = Some(CurFile {
            name: path,
            file: std::io::BufWriter::with_capacity(256 * 1024, file),
            hasher: Sha256::new(),
            remaining: size,
            size,
        });
        self.state = TarState::Body;
        if size == 0 {
            self.finish_file()?;
        }
        Ok(())
    }

    fn finish_file(&mut self) -> std::result::Result<(), String> {
        let cur = self.cur.take().expect("a file to finish");
        let CurFile { name, mut file, hasher, size, .. } = cur;
        std::io::Write::flush(&mut file).map_err(|e| format!("writing {name}: {e}"))?;
        drop(file);
        let got: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let exp = &self.expected[&name];
        if got != exp.sha256 {
            let _ = std::fs::remove_file(self.staging.join(&name));
            return Err(format!(
                "copy-out: {name} differs: the container's sha256 {}, the {size} bytes written here {got}: deleted",
                exp.sha256
            ));
        }
        self.done.push((name, size, got));
        self.pad_left = (512 - size % 512) % 512;
        self.state = if self.pad_left == 0 { TarState::Header } else { TarState::Pad };
        Ok(())
    }

    /// The stream ended: it must have reached its end-of-archive with every expected file; then the files are
    /// renamed into `dest`. Returns them in `expected` order.
    pub fn commit(mut self) -> Result<Vec<CopiedFile>> {
        if let Some(m) = &self.failed {
            return Err(Error::input(m.clone()));
        }
        if !matches!(self.state, TarState::End) {
            let msg = format!(
                "tar stream ended at byte {} before its end-of-archive blocks{}: the copy was interrupted; nothing kept",
                self.received,
                self.cur.as_ref().map(|c| format!(" ({} announced {} bytes, {} missing)", c.name, c.size, c.remaining)).unwrap_or_default()
            );
            return Err(self.fail(msg));
        }
        let missing: Vec<String> =
            self.expected.keys().filter(|n| !self.done.iter().any(|(d, _, _)| d == *n)).cloned().collect();
        if !missing.is_empty() {
            let msg = format!("copy-out: {} missing from the tar stream; nothing kept", missing.join(", "));
            return Err(self.fail(msg));
        }
        let mut out = Vec::new();
        for (name, size, sha) in std::mem::take(&mut self.done) {
            let to = self.dest.join(&name);
            if let Err(e) = std::fs::rename(self.staging.join(&name), &to) {
                let msg = format!("{}: {e}", to.display());
                return Err(self.fail(msg));
            }
            out.push(CopiedFile { name, path: to.to_string_lossy().to_string(), size, sha256: sha });
        }
        let _ = std::fs::remove_dir(&self.staging);
        self.committed = true;
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

impl Drop for TarSink {
    fn drop(&mut self) {
        if !self.committed {
            self.cur = None;
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// Copy a local file into `dir/name` through a staging file (created exclusively, never following a link),
/// checking the sha256 of the bytes written; a rename puts it in place (replacing, not following, a link).
pub fn copy_verified(src: &Path, dir: &Path, name: &str, sha256: &str) -> Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{name}.nsyskit-{:x}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let res = (|| -> std::io::Result<(u64, String)> {
        let mut r = std::fs::File::open(src)?;
        let f = std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(256 * 1024, f);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut n = 0u64;
        loop {
            let k = std::io::Read::read(&mut r, &mut buf)?;
            if k == 0 {
                break;
            }
            h.update(&buf[..k]);
            std::io::Write::write_all(&mut w, &buf[..k])?;
            n += k as u64;
        }
        std::io::Write::flush(&mut w)?;
        Ok((n, h.finalize().iter().map(|b| format!("{b:02x}")).collect()))
    })();
    match res {
        Ok((n, got)) if got == sha256 => {
            std::fs::rename(&tmp, dir.join(name))
                .map_err(|e| Error::env(format!("{}: {e}", dir.join(name).display())))?;
            Ok(n)
        }
        Ok((_, got)) => {
            let _ = std::fs::remove_file(&tmp);
            Err(Error::env(format!(
                "{}: copied bytes have sha256 {got}, expected {sha256}: deleted",
                dir.join(name).display()
            )))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(Error::env(format!("copying {} to {}: {e}", src.display(), dir.join(name).display())))
        }
    }
}
