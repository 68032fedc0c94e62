//! What a generated/JIT module says about itself (issue 39 B137/B140): its ELF identity (GNU build ID, SONAME,
//! the libraries it needs, the compiler's `.comment`, the flags `-frecord-gcc-switches` kept in
//! `.GCC.command.line`, the ABI note), the build flags of a `build.ninja` beside it (PyTorch C++/CUDA
//! extensions), and the recorded processes whose command line names it (the compile event).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A module's identity as far as it can be read from the file and what lies beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModuleIdentity {
    /// `ELF64 x86-64`, `ELF64 aarch64`, …; null for a file that is not a 64-bit little-endian ELF object (then
    /// nothing below is read from it).
    pub format: Option<String>,
    /// The GNU build ID (`.note.gnu.build-id`, hex): identifies the exact link of the binary.
    pub build_id: Option<String>,
    /// `DT_SONAME`.
    pub soname: Option<String>,
    /// `DT_NEEDED`: the shared libraries it links against (its dependency identity), in order.
    pub needed: Vec<String>,
    /// `.comment`: the compilers that built it (`GCC: (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0`).
    pub compilers: Vec<String>,
    /// `.GCC.command.line` (built with `-frecord-gcc-switches`): the compile flags, as recorded.
    pub recorded_flags: Vec<String>,
    /// `.note.ABI-tag`: `OS major.minor.patch` (the oldest kernel ABI it targets), when present.
    pub abi_tag: Option<String>,
    /// `build.ninja` beside it (a PyTorch extension's build folder): its `cflags`, `cuda_cflags`, `ldflags`
    /// and `cuda_post_cflags` lines, and the sources it compiles.
    pub ninja: Option<NinjaBuild>,
    /// Why something could not be read (an unreadable or truncated file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The build description of a `build.ninja` beside a module.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NinjaBuild {
    pub path: String,
    /// `NAME = VALUE` for the flag variables (`cflags`, `post_cflags`, `cuda_cflags`, `cuda_post_cflags`,
    /// `ldflags`), in file order.
    pub flags: Vec<String>,
    /// The sources of its `build X.o: compile SRC` / `cuda_compile SRC` edges, each with its sha256 when the
    /// file is there (the source identity).
    pub sources: Vec<SourceFile>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SourceFile {
    pub path: String,
    pub sha256: Option<String>,
}

const MAX_SECTION: u64 = 1 << 20;

fn u16le(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32le(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64le(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

fn read_at(f: &File, off: u64, len: u64) -> Option<Vec<u8>> {
    if len > MAX_SECTION {
        return None;
    }
    let mut buf = vec![0u8; len as usize];
    f.read_exact_at(&mut buf, off).ok()?;
    Some(buf)
}

struct Section {
    name: String,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
}

fn cstr(b: &[u8], at: usize) -> String {
    let rest = b.get(at..).unwrap_or(&[]);
    let end = rest.iter().position(|c| *c == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end]).into_owned()
}

fn strings(b: &[u8]) -> Vec<String> {
    b.split(|c| *c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).trim().to_string()).collect()
}

/// The sections of a 64-bit little-endian ELF file, with its machine name.
fn sections(f: &File) -> Option<(String, Vec<Section>)> {
    let h = read_at(f, 0, 64)?;
    if &h[..4] != b"\x7fELF" || h[4] != 2 || h[5] != 1 {
        return None;
    }
    let machine = match u16le(&h, 0x12)? {
        0x3e => "x86-64".to_string(),
        0xb7 => "aarch64".to_string(),
        m => format!("machine {m:#x}"),
    };
    let (shoff, shentsize, shnum, shstrndx) =
        (u64le(&h, 0x28)?, u16le(&h, 0x3a)? as u64, u16le(&h, 0x3c)? as u64, u16le(&h, 0x3e)? as usize);
    if shentsize < 64 || shnum == 0 || shnum > 4096 {
        return Some((machine, Vec::new()));
    }
    let table = read_at(f, shoff, shentsize * shnum)?;
    let mut raw = Vec::new();
    for i in 0..shnum as usize {
        let b = &table[i * shentsize as usize..];
        raw.push((u32le(b, 0)?, u32le(b, 4)?, u64le(b, 0x18)?, u64le(b, 0x20)?, u32le(b, 0x28)?));
    }
    let names = raw.get(shstrndx).and_then(|s| read_at(f, s.2, s.3)).unwrap_or_default();
    let secs = raw
        .into_iter()
        .map(|(n, kind, offset, size, link)| Section { name: cstr(&names, n as usize), kind, offset, size, link })
        .collect();
    Some((machine, secs))
}

/// The descriptor of the first note in a note section.
fn note_desc(b: &[u8]) -> Option<&[u8]> {
    let (namesz, descsz) = (u32le(b, 0)? as usize, u32le(b, 4)? as usize);
    let start = 12 + namesz.div_ceil(4) * 4;
    b.get(start..start + descsz)
}

/// Read the ELF identity of `path` and the `build.ninja` beside it.
pub fn identify(path: &Path) -> ModuleIdentity {
    let mut id = ModuleIdentity::default();
    match File::open(path) {
        Ok(f) => elf_identity(&f, &mut id),
        Err(e) => id.note = Some(format!("cannot open: {e}")),
    }
    let ninja = path.parent().map(|d| d.join("build.ninja")).filter(|p| p.is_file());
    id.ninja = ninja.and_then(|p| std::fs::read_to_string(&p).ok().map(|t| parse_ninja(&p, &t)));
    id
}

fn elf_identity(f: &File, id: &mut ModuleIdentity) {
    let Some((machine, secs)) = sections(f) else { return };
    id.format = Some(format!("ELF64 {machine}"));
    let data = |s: &Section| read_at(f, s.offset, s.size);
    for s in &secs {
        match s.name.as_str() {
            ".note.gnu.build-id" => {
                id.build_id =
                    data(s).and_then(|b| note_desc(&b).map(|d| d.iter().map(|x| format!("{x:02x}")).collect()))
            }
            ".note.ABI-tag" => {
                id.abi_tag = data(s).and_then(|b| {
                    let d = note_desc(&b)?;
                    let os = match u32le(d, 0)? {
                        0 => "Linux",
                        1 => "GNU",
                        _ => "other",
                    };
                    Some(format!("{os} {}.{}.{}", u32le(d, 4)?, u32le(d, 8)?, u32le(d, 12)?))
                })
            }
            ".comment" => id.compilers = data(s).map(|b| strings(&b)).unwrap_or_default(),
            ".GCC.command.line" => id.recorded_flags = data(s).map(|b| strings(&b)).unwrap_or_default(),
            _ => {}
        }
    }
    // .dynamic (SHT_DYNAMIC = 6): DT_NEEDED 1, DT_SONAME 14, strings in the linked section
    if let Some(dynsec) = secs.iter().find(|s| s.kind == 6) {
        let strtab = secs.get(dynsec.link as usize).and_then(&data).unwrap_or_default();
        if let Some(d) = data(dynsec) {
            for e in d.chunks_exact(16) {
                let (tag, val) = (u64le(e, 0).unwrap_or(0), u64le(e, 8).unwrap_or(0) as usize);
                match tag {
                    0 => break,
                    1 => id.needed.push(cstr(&strtab, val)),
                    14 => id.soname = Some(cstr(&strtab, val)),
                    _ => {}
                }
            }
        }
    }
}

/// The flag variables and compiled sources of a `build.ninja` (sources relative to its folder resolved).
pub fn parse_ninja(path: &Path, text: &str) -> NinjaBuild {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut b = NinjaBuild { path: path.display().to_string(), ..Default::default() };
    for line in text.lines() {
        let l = line.trim();
        if let Some((k, _)) = l.split_once('=') {
            let k = k.trim();
            if ["cflags", "post_cflags", "cuda_cflags", "cuda_post_cflags", "ldflags"].contains(&k) {
                b.flags.push(l.to_string());
                continue;
            }
        }
        if let Some(rest) = l.strip_prefix("build ") {
            if let Some((_, rule)) = rest.split_once(':') {
                let mut words = rule.split_whitespace();
                if matches!(words.next(), Some("compile" | "cuda_compile")) {
                    for src in words.take_while(|w| *w != "|" && *w != "||") {
                        let p = if Path::new(src).is_absolute() { src.into() } else { dir.join(src) };
                        let sha = std::fs::read(&p).ok().map(|bytes| {
                            use sha2::{Digest, Sha256};
                            Sha256::digest(&bytes).iter().map(|x| format!("{x:02x}")).collect()
                        });
                        b.sources.push(SourceFile { path: p.display().to_string(), sha256: sha });
                    }
                }
            }
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real ELF identity of a library every Linux test machine has, checked against what `readelf` says
    /// when it is installed.
    #[test]
    fn reads_a_real_shared_library() {
        let Some(lib) = ["/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib64/libz.so.1"]
            .iter()
            .map(Path::new)
            .find(|p| p.is_file())
        else {
            eprintln!("SKIP: no libz.so.1");
            return;
        };
        let id = identify(lib);
        assert!(id.format.as_deref().unwrap().starts_with("ELF64"), "{id:?}");
        assert_eq!(id.soname.as_deref(), Some("libz.so.1"));
        assert!(id.needed.iter().any(|n| n.starts_with("libc.so")), "{id:?}");
        if let Ok(o) = std::process::Command::new("readelf").args(["-n"]).arg(lib).output() {
            let text = String::from_utf8_lossy(&o.stdout);
            if let Some(line) = text.lines().find(|l| l.contains("Build ID:")) {
                assert_eq!(id.build_id.as_deref(), Some(line.split(':').nth(1).unwrap().trim()));
            }
        }
        // not an ELF file
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("x.so"), b"not elf").unwrap();
        assert_eq!(identify(&d.path().join("x.so")).format, None);
    }

    #[test]
    fn ninja_flags_and_sources() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("k.cu"), "__global__ void k() {}\n").unwrap();
        let text = "ninja_required_version = 1.3\ncxx = c++\ncflags = -DTORCH_EXTENSION_NAME=k -O3 -std=c++17\ncuda_cflags = -gencode=arch=compute_90,code=sm_90 -O3\nldflags = -shared -lc10\nbuild k.cuda.o: cuda_compile k.cu\nbuild k.so: link k.cuda.o\n";
        let b = parse_ninja(&d.path().join("build.ninja"), text);
        assert_eq!(b.flags.len(), 3);
        assert!(b.flags[1].contains("sm_90"));
        assert_eq!(b.sources.len(), 1);
        assert_eq!(b.sources[0].sha256.as_ref().map(|s| s.len()), Some(64));
    }
}
