//! The jsonl sink: one JSON object per change appended to a file ([`super::change_json`]),
//! fsynced before the position moves.
//!
//! A batch written but not yet acknowledged to the store when the host dies is written again
//! by the next owner: lines may repeat, and consumers dedupe by `(row, column, commit_ts)`.
//! A line torn by a crash mid-write is cut off when the file is next opened (it was never
//! acknowledged, so it is written again whole).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use super::{Batch, Deliver, Failure, change_json};

/// Appends to a file.
pub struct JsonlSink {
    path: PathBuf,
    /// Open while writes succeed; dropped on an error, so that the next attempt re-opens the
    /// file and cuts a torn tail.
    file: Option<File>,
}

impl JsonlSink {
    /// A sink appending to `path` (created, with its folder, on the first delivery).
    pub fn new(path: PathBuf) -> JsonlSink {
        JsonlSink { path, file: None }
    }

    fn open(&self) -> std::io::Result<File> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&self.path)?;
        let len = cut_torn_tail(&mut file)?;
        file.seek(SeekFrom::Start(len))?;
        Ok(file)
    }
}

/// Truncates `file` after its last newline (a line without one was torn by a crash) and
/// returns the new length.
fn cut_torn_tail(file: &mut File) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    let mut end = len;
    let mut buf = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            let keep = start + i as u64 + 1;
            if keep < len {
                file.set_len(keep)?;
                file.sync_data()?;
            }
            return Ok(keep);
        }
        end = start;
    }
    if len > 0 {
        file.set_len(0)?;
        file.sync_data()?;
    }
    Ok(0)
}

impl Deliver for JsonlSink {
    fn deliver(&mut self, batch: &Batch<'_>) -> Result<(), Failure> {
        let mut text = String::new();
        for c in batch.changes {
            text.push_str(&change_json(c).to_string());
            text.push('\n');
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => self
                .file
                .insert(self.open().map_err(|e| Failure::Retry(format!("opening {}: {e}", self.path.display())))?),
        };
        let written = file.write_all(text.as_bytes()).and_then(|()| file.sync_data());
        if let Err(e) = written {
            self.file = None;
            return Err(Failure::Retry(format!("writing {}: {e}", self.path.display())));
        }
        Ok(())
    }
}
