//! The outbox: finished runs (result and power trace, as the `RunDone` sent to the coordinator)
//! kept on disk until the coordinator acknowledges them, so a result survives a dropped link and a
//! restart of the agent.
//!
//! One file per run, `<dir>/<run id>.done`, written to a temporary name, synced and renamed, so a
//! crash leaves either the whole entry or none. Run ids follow the run core's rule
//! ([`run_id_chars_ok`]: at most 128 characters of `A-Za-z0-9-_.:`), so they are safe file names.

use crate::run::lifecycle::run_id_chars_ok;
use gpufleet_proto::v1 as pb;
use prost::Message;
use std::io::Write;
use std::path::{Path, PathBuf};

const SUFFIX: &str = ".done";

/// The outbox directory of one agent.
#[derive(Debug, Clone)]
pub struct Outbox {
    dir: PathBuf,
}

impl Outbox {
    /// Opens (creating) the outbox under `dir`.
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn open(dir: &Path) -> std::io::Result<Outbox> {
        std::fs::create_dir_all(dir)?;
        Ok(Outbox {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, run_id: &str) -> Option<PathBuf> {
        // The run core's rule, and not empty or hidden, as a file name must be.
        let safe = !run_id.is_empty() && !run_id.starts_with('.') && run_id_chars_ok(run_id);
        safe.then(|| self.dir.join(format!("{run_id}{SUFFIX}")))
    }

    /// Stores a finished run durably.
    ///
    /// # Errors
    /// An unusable run id, or a failed write.
    pub fn put(&self, done: &pb::RunDone) -> std::io::Result<()> {
        let path = self.path(&done.run_id).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "unusable run id")
        })?;
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&done.encode_to_vec())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// The entry of `run_id`, if it waits here. An entry that cannot be read or decoded is said
    /// in the log with its file and left in place for a person to look at.
    pub fn get(&self, run_id: &str) -> Option<pb::RunDone> {
        let path = self.path(run_id)?;
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(file = %path.display(), "outbox entry unreadable: {e}");
                return None;
            }
        };
        match pb::RunDone::decode(bytes.as_slice()) {
            Ok(done) => Some(done),
            Err(e) => {
                tracing::warn!(file = %path.display(), "outbox entry does not decode: {e}");
                None
            }
        }
    }

    /// Forgets an acknowledged run.
    pub fn remove(&self, run_id: &str) {
        if let Some(p) = self.path(run_id) {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Run ids waiting for an acknowledgement, sorted. Unreadable entries are skipped (and left
    /// for a person to look at).
    pub fn pending(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(SUFFIX))
                    .map(str::to_string)
            })
            .collect();
        ids.sort();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(id: &str) -> pb::RunDone {
        pb::RunDone {
            run_id: id.into(),
            result: Some(pb::RunResult {
                run_id: id.into(),
                message: "ok".into(),
                ..Default::default()
            }),
            power: vec![pb::PowerSample {
                watts: 12.5,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn entries_survive_reopening_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        let ob = Outbox::open(&dir.path().join("outbox")).unwrap();
        ob.put(&done("run-b")).unwrap();
        ob.put(&done("run-a")).unwrap();
        let again = Outbox::open(&dir.path().join("outbox")).unwrap();
        assert_eq!(again.pending(), vec!["run-a", "run-b"]);
        assert_eq!(again.get("run-a"), Some(done("run-a")));
        again.remove("run-a");
        assert_eq!(again.pending(), vec!["run-b"]);
        assert_eq!(again.get("run-a"), None);
    }

    #[test]
    fn refuses_run_ids_that_are_not_plain_file_names() {
        let dir = tempfile::tempdir().unwrap();
        let ob = Outbox::open(dir.path()).unwrap();
        for bad in ["", "../x", "a/b", ".hidden", &"x".repeat(129)] {
            assert!(ob.put(&done(bad)).is_err(), "{bad}");
            assert_eq!(ob.get(bad), None);
        }
        assert!(ob.pending().is_empty());
    }
}
