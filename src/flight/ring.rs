//! The recording's files: a directory of numbered segments (`flight-000001.jsonl`, …), at
//! most [`SEGMENTS`] of them; the oldest is deleted when a new one begins. Each segment is at
//! most a [`SEGMENTS`]th of the size limit, so the directory stays within the limit (plus the
//! line that crossed it).

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Segments kept.
pub const SEGMENTS: usize = 4;

const PREFIX: &str = "flight-";
const SUFFIX: &str = ".jsonl";

/// The segment files of `dir`, oldest first (by number).
pub(crate) fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok());
        if let Some(n) = number {
            out.push((n, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Writes lines into the segment files of one directory.
pub(super) struct Ring {
    dir: PathBuf,
    segment_limit: u64,
    number: u64,
    written: u64,
    /// Bytes of the segment's header and snapshot, which do not count towards its limit.
    start: u64,
    out: BufWriter<File>,
}

impl Ring {
    /// Open `dir` (created if missing) for a recording of at most `max_bytes`: a new segment
    /// after the ones already there, which count towards the limit.
    pub(crate) fn open(dir: &Path, max_bytes: u64) -> std::io::Result<Self> {
        fs::create_dir_all(dir)?;
        let number = segments(dir)?.last().map_or(1, |(n, _)| n + 1);
        let out = Self::create(dir, number)?;
        let ring = Ring {
            dir: dir.to_path_buf(),
            segment_limit: (max_bytes / SEGMENTS as u64).max(1),
            number,
            written: 0,
            start: 0,
            out,
        };
        ring.prune()?;
        Ok(ring)
    }

    fn create(dir: &Path, number: u64) -> std::io::Result<BufWriter<File>> {
        let path = dir.join(format!("{PREFIX}{number:06}{SUFFIX}"));
        Ok(BufWriter::new(File::create(path)?))
    }

    fn prune(&self) -> std::io::Result<()> {
        let all = segments(&self.dir)?;
        for (_, path) in all.iter().take(all.len().saturating_sub(SEGMENTS)) {
            fs::remove_file(path)?;
        }
        Ok(())
    }

    /// The current segment's number.
    pub(crate) fn segment(&self) -> u64 {
        self.number
    }

    /// Whether the current segment is full: the next line belongs in a new one.
    pub(crate) fn full(&self) -> bool {
        self.written - self.start >= self.segment_limit
    }

    /// What the segment holds so far is its snapshot: the limit counts the lines after it (a
    /// snapshot larger than a segment would otherwise begin a new segment at every line).
    pub(crate) fn mark_start(&mut self) {
        self.start = self.written;
    }

    /// Begin the next segment, deleting the oldest beyond [`SEGMENTS`].
    pub(crate) fn rotate(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        self.number += 1;
        self.out = Self::create(&self.dir, self.number)?;
        self.written = 0;
        self.start = 0;
        self.prune()
    }

    /// Append one line (a newline is added).
    pub(crate) fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.out.write_all(line)?;
        self.out.write_all(b"\n")?;
        self.written += line.len() as u64 + 1;
        Ok(())
    }

    /// Write what is buffered to the file.
    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(dir: &Path) -> Vec<(u64, u64)> {
        segments(dir)
            .unwrap()
            .into_iter()
            .map(|(n, p)| (n, fs::metadata(p).unwrap().len()))
            .collect()
    }

    #[test]
    fn segments_rotate_and_the_oldest_go_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut ring = Ring::open(dir.path(), 400).unwrap();
        let line = [b'x'; 49];
        for _ in 0..40 {
            if ring.full() {
                ring.rotate().unwrap();
            }
            ring.write_line(&line).unwrap();
        }
        ring.flush().unwrap();
        let sizes = sizes(dir.path());
        // 40 lines of 50 bytes, 100 bytes a segment: 20 segments written, the last 4 kept.
        assert_eq!(
            sizes.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            [17, 18, 19, 20]
        );
        assert!(sizes.iter().all(|(_, len)| *len == 100), "{sizes:?}");
        assert_eq!(ring.segment(), 20);
    }

    #[test]
    fn a_snapshot_larger_than_a_segment_does_not_count_towards_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut ring = Ring::open(dir.path(), 400).unwrap();
        ring.write_line(&[b's'; 299]).unwrap();
        ring.mark_start();
        assert!(!ring.full());
        ring.write_line(&[b'x'; 99]).unwrap();
        assert!(ring.full());
    }

    #[test]
    fn reopening_continues_after_the_last_segment_and_counts_the_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..5 {
            let mut ring = Ring::open(dir.path(), 1000).unwrap();
            ring.write_line(b"{}").unwrap();
            ring.flush().unwrap();
        }
        let numbers: Vec<u64> = segments(dir.path()).unwrap().iter().map(|s| s.0).collect();
        assert_eq!(numbers, [2, 3, 4, 5]);
        fs::write(dir.path().join("notes.txt"), "not a segment").unwrap();
        assert_eq!(segments(dir.path()).unwrap().len(), 4);
    }
}
