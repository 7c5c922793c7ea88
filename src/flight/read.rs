//! Reading a recording: one segment file, or a directory of them in order.

use super::format::{Body, FORMAT, Line};
use std::path::{Path, PathBuf};

/// A recording that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A file or directory could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A line is not a recording line.
    #[error("{path}:{line}: {message}")]
    Line {
        /// The file.
        path: PathBuf,
        /// The line number (1-based).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A directory without segments.
    #[error("{0}: no flight-NNNNNN.jsonl segments in this directory")]
    Empty(PathBuf),
}

/// The lines of the recording at `path` (a segment file, or a directory of segments, oldest
/// first). Each segment must begin with a header of format [`FORMAT`]. The last line of a file
/// without its newline (the controller stopped while writing it) is left out.
pub fn read_recording(path: &Path) -> Result<Vec<Line>, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let files = if path.is_dir() {
        let files: Vec<PathBuf> = super::ring::segments(path)
            .map_err(io)?
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        if files.is_empty() {
            return Err(ReadError::Empty(path.to_path_buf()));
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut out = Vec::new();
    for file in files {
        read_segment(&file, &mut out)?;
    }
    Ok(out)
}

fn read_segment(path: &Path, out: &mut Vec<Line>) -> Result<(), ReadError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |line: usize, message: String| ReadError::Line {
        path: path.to_path_buf(),
        line,
        message,
    };
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    for (i, raw) in lines.iter().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let parsed: Line = match serde_json::from_str(raw) {
            Ok(l) => l,
            Err(_) if i + 1 == lines.len() && !complete => break,
            Err(e) => return Err(bad(i + 1, format!("not a recording line: {e}"))),
        };
        if i == 0 {
            match &parsed.body {
                Body::Header { format, .. } if format == FORMAT => {}
                Body::Header { format, .. } => {
                    return Err(bad(
                        1,
                        format!("format {format}: this version reads {FORMAT}"),
                    ));
                }
                _ => return Err(bad(1, format!("no header: a segment begins with {FORMAT}"))),
            }
        }
        out.push(parsed);
    }
    Ok(())
}
