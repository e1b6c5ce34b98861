//! Counted progress on top of the [`Progress`] callback: an experiment names the stage it is in
//! ([`Steps::set_message`]) and counts the steps it finishes ([`Steps::inc`]); every finished step is one call of
//! the callback with the current stage's name, so a front end advances its bar by one per call.

use std::sync::Mutex;

use oversub_base::sync::lock;

use super::{no_progress, Progress};

/// A [`Progress`] callback with the name of the current stage.
pub struct Steps<'a> {
    progress: Progress<'a>,
    stage: Mutex<String>,
}

impl std::fmt::Debug for Steps<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steps")
            .field("stage", &*lock(&self.stage))
            .finish_non_exhaustive()
    }
}

impl<'a> Steps<'a> {
    pub fn new(progress: Progress<'a>) -> Steps<'a> {
        Steps {
            progress,
            stage: Mutex::new(String::new()),
        }
    }

    /// Steps that report nothing (for runs whose steps are not counted).
    pub fn hidden() -> Steps<'static> {
        Steps::new(&no_progress)
    }

    /// Names the stage the following steps belong to.
    pub fn set_message(&self, stage: impl Into<String>) {
        *lock(&self.stage) = stage.into();
    }

    /// Reports `n` finished steps of the current stage.
    pub fn inc(&self, n: u64) {
        let stage = lock(&self.stage).clone();
        for _ in 0..n {
            (self.progress)(&stage);
        }
    }
}
