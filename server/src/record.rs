//! The match's recording written to files on a thread of its own: the machine's thread
//! hands it finished blocks and never waits on the disk. A disk that falls behind or
//! fails ends the recording (logged and counted); the match plays on.

use crate::metrics::Metrics;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// Blocks waiting for the disk at most (each about a second of the match): past them the
/// recording ends rather than the server's memory growing.
const QUEUE: usize = 256;
/// How long a shutdown waits for the last blocks to be written.
const FINISH: Duration = Duration::from_secs(5);

/// Where and how the server records its match (`expel serve --record DIR`).
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// The folder the recordings go in (made if missing).
    pub dir: PathBuf,
    /// Bytes past which a recording goes on in a new part (`NAME.1`, `NAME.2`, ...).
    pub part_bytes: u64,
    /// The rules' name, as a replay finds them (`expel serve --mode`'s names).
    pub rules: String,
}

impl RecordConfig {
    /// Recordings in `dir`, in parts of 64 MiB, of the rules named `rules`.
    pub fn new(dir: impl Into<PathBuf>, rules: impl Into<String>) -> RecordConfig {
        RecordConfig {
            dir: dir.into(),
            part_bytes: 64 << 20,
            rules: rules.into(),
        }
    }
}

/// The recording's writer: a thread and the queue to it.
pub(crate) struct Writer {
    tx: Option<SyncSender<Vec<u8>>>,
    failed: Arc<AtomicBool>,
    done: Receiver<()>,
    path: PathBuf,
}

impl Writer {
    /// Starts writing a recording made at `unix` into `cfg.dir`.
    pub(crate) fn start(
        cfg: &RecordConfig,
        unix: u64,
        port: u16,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Writer> {
        std::fs::create_dir_all(&cfg.dir)?;
        let path = cfg.dir.join(format!("expel-{unix}-{port}.rec"));
        let file = File::create_new(&path)?;
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
        let (done_tx, done) = sync_channel(1);
        let failed = Arc::new(AtomicBool::new(false));
        let (p, f, part_bytes) = (path.clone(), failed.clone(), cfg.part_bytes);
        std::thread::Builder::new()
            .name("expel-record".into())
            .spawn(move || {
                if let Err(e) = write(file, &p, part_bytes, &rx, &metrics) {
                    warn!(path = %p.display(), error = %e, "writing the recording failed");
                    f.store(true, Ordering::Relaxed);
                    // Whatever still comes is dropped, so the machine never waits.
                    while rx.recv().is_ok() {}
                }
                let _ = done_tx.send(());
            })?;
        info!(path = %path.display(), "recording the match");
        Ok(Writer {
            tx: Some(tx),
            failed,
            done,
            path,
        })
    }

    /// The recording's first part.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Hands over the next bytes; an error when the disk is behind or failed (the
    /// recording is then over).
    pub(crate) fn send(&mut self, bytes: Vec<u8>) -> Result<(), &'static str> {
        if self.failed.load(Ordering::Relaxed) {
            return Err("writing it failed");
        }
        let tx = self.tx.as_ref().ok_or("it was finished")?;
        match tx.try_send(bytes) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err("the disk fell behind"),
            Err(TrySendError::Disconnected(_)) => Err("its writer ended"),
        }
    }

    /// Lets the writer write what it has and waits for it (a while at most).
    pub(crate) fn finish(mut self) {
        self.tx = None;
        if self.done.recv_timeout(FINISH).is_err() {
            warn!(path = %self.path.display(), "the recording's last blocks were not written in time");
        }
    }
}

/// The writer's loop: each chunk to the current part, a new part past `part_bytes`
/// (starting with the recording's start again).
fn write(
    file: File,
    path: &Path,
    part_bytes: u64,
    rx: &Receiver<Vec<u8>>,
    metrics: &Metrics,
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(file);
    let mut start: Option<Vec<u8>> = None;
    let (mut written, mut part) = (0u64, 0u32);
    while let Ok(chunk) = rx.recv() {
        if start.is_none() {
            start = Some(chunk.clone());
        } else if written + chunk.len() as u64 > part_bytes {
            out.flush()?;
            part += 1;
            let next = PathBuf::from(format!("{}.{part}", path.display()));
            out = std::io::BufWriter::new(File::create_new(&next)?);
            let first = start.as_deref().unwrap_or_default();
            out.write_all(first)?;
            written = first.len() as u64;
            metrics.record_bytes.inc_by(written);
        }
        out.write_all(&chunk)?;
        written += chunk.len() as u64;
        metrics.record_bytes.inc_by(chunk.len() as u64);
        // Each block (about a second) reaches the file: a crash loses the one being made.
        out.flush()?;
    }
    out.flush()?;
    out.get_ref().sync_all()
}
