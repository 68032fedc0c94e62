//! Paths a tool reads or writes: what kind of file a path is, opening an input without hanging on a FIFO, and
//! refusing an output path that is one of the inputs (`report cap.sqlite --html cap.sqlite` once overwrote
//! the evidence).

use std::fs::{File, FileType, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::{Error, Result};

/// `a directory`, `a FIFO`, `a socket`, `a character device`, `a block device`, `a regular file`.
pub fn file_kind(ft: &FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "a regular file"
    }
}

fn meta(p: &Path) -> Result<Metadata> {
    std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::input(format!("{}: no such file", p.display())),
        _ => Error::input(format!("{}: cannot read: {e}", p.display())),
    })
}

/// Open an input path for reading: a regular file, or a FIFO/pipe (`<(cmd)`, `/dev/stdin` on a pipe). A FIFO
/// is opened without blocking, so one that nothing writes to reads as empty instead of hanging. Directories,
/// devices and sockets are input errors naming the path and what it is.
pub fn open_input(p: &Path) -> Result<File> {
    let m = meta(p)?;
    let ft = m.file_type();
    if !(ft.is_file() || ft.is_fifo()) {
        return Err(Error::input(format!(
            "{}: is {}, not a file (give a file, or `-` for stdin)",
            p.display(),
            file_kind(&ft)
        )));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| Error::input(format!("{}: cannot read: {e}", p.display())))?;
    // the file was swapped between the check and the open: check what was opened
    let m = f.metadata().map_err(|e| Error::input(format!("{}: cannot read: {e}", p.display())))?;
    if !(m.file_type().is_file() || m.file_type().is_fifo()) {
        return Err(Error::input(format!("{}: is {}, not a file", p.display(), file_kind(&m.file_type()))));
    }
    // back to blocking reads: a FIFO with a writer delivers its data; without one it reads as end of file
    use std::os::fd::AsRawFd;
    unsafe {
        let fd = f.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(f)
}

/// Read a whole input path ([`open_input`]), with errors that name it.
pub fn read_input(p: &Path) -> Result<Vec<u8>> {
    let mut f = open_input(p)?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).map_err(|e| Error::input(format!("{}: cannot read: {e}", p.display())))?;
    Ok(buf)
}

/// Do two paths name the same file (same device and inode, through symlinks and hard links)?
/// False when either does not exist.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Refuse to write `out` (named by flag `out_arg` in messages) when it is one of the `inputs` (the same
/// inode, also through a symlink or a hard link): writing would destroy the evidence being read. Every binary
/// that writes a file calls this before writing.
pub fn refuse_output_over_input(out: &Path, out_arg: &str, inputs: &[&Path]) -> Result<()> {
    for input in inputs {
        if same_file(out, input) {
            return Err(Error::usage(format!(
                "{out_arg} {}: is the input {} (the same file): refusing to overwrite the evidence",
                out.display(),
                input.display()
            ))
            .with_arg(out_arg.to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_fifos_and_same_files() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("f");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // nothing writes to it: empty, at once
        assert_eq!(read_input(&fifo).unwrap(), Vec::<u8>::new());
        let e = read_input(Path::new("/dev/null")).unwrap_err();
        assert!(e.message.contains("is a character device"), "{}", e.message);
        assert!(read_input(d.path()).unwrap_err().message.contains("is a directory"));
        let a = d.path().join("a");
        std::fs::write(&a, "x").unwrap();
        std::fs::hard_link(&a, d.path().join("h")).unwrap();
        std::os::unix::fs::symlink(&a, d.path().join("s")).unwrap();
        assert!(same_file(&a, &d.path().join("h")) && same_file(&a, &d.path().join("s")));
        assert!(!same_file(&a, &d.path().join("missing")));
        let e = refuse_output_over_input(&d.path().join("s"), "--html", &[&a]).unwrap_err();
        assert!(e.message.starts_with("--html "), "{}", e.message);
    }
}
