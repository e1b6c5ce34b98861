//! The measured steps both paging runs (host and cuda) are made of: drop the page cache, time one operation, keep
//! the time under its name, count the step done.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use oversub_core::{PagerError, Ticket};

use super::{wait_complete, PagingEvent, PagingProgress};
use crate::harness::cache::CacheDrop;
use crate::LabError;

/// CPU seconds this process has used so far, every thread, user and system.
fn process_cpu_s() -> f64 {
    // SAFETY: a zeroed rusage is a valid value of the plain C struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The samples of a run, taken one measured step at a time.
pub(crate) struct Sampler<'p> {
    pub(crate) progress: PagingProgress<'p>,
    pub(crate) cache: CacheDrop,
    /// Seconds per sample, by name (each run's `NAMES`).
    pub(crate) samples: BTreeMap<&'static str, Vec<f64>>,
    /// CPU seconds of the whole process (I/O threads included) per step measured with `count_cpu`.
    pub(crate) cpu: BTreeMap<&'static str, Vec<f64>>,
}

impl<'p> Sampler<'p> {
    /// A sampler that keeps the measurements `names` (a time under any other name is dropped).
    pub(crate) fn new(
        progress: PagingProgress<'p>,
        cache: CacheDrop,
        names: &[&'static str],
    ) -> Sampler<'p> {
        Sampler {
            progress,
            cache,
            samples: names.iter().map(|n| (*n, Vec::new())).collect(),
            cpu: BTreeMap::new(),
        }
    }

    pub(crate) fn push(&mut self, name: &'static str, d: Duration) {
        if let Some(v) = self.samples.get_mut(name) {
            v.push(d.as_secs_f64());
        }
    }

    /// One step of the stage finished.
    pub(crate) fn step_done(&self) {
        (self.progress)(PagingEvent::StepDone);
    }

    /// One measured step: the page cache of `fds` dropped, then `op` timed (and, with `count_cpu`, the process's CPU
    /// time over it) and kept under `name`.
    pub(crate) fn measure(
        &mut self,
        name: &'static str,
        fds: &[libc::c_int],
        count_cpu: bool,
        op: impl FnOnce() -> Result<(), LabError>,
    ) -> Result<(), LabError> {
        self.cache.apply_all(fds)?;
        let c = process_cpu_s();
        let t = Instant::now();
        op()?;
        self.push(name, t.elapsed());
        if count_cpu {
            self.cpu.entry(name).or_default().push(process_cpu_s() - c);
        }
        self.step_done();
        Ok(())
    }

    /// One measured step that leaves the page cache as it is (the operation does no file I/O).
    pub(crate) fn time(
        &mut self,
        name: &'static str,
        op: impl FnOnce() -> Result<(), LabError>,
    ) -> Result<(), LabError> {
        let t = Instant::now();
        op()?;
        self.push(name, t.elapsed());
        self.step_done();
        Ok(())
    }

    /// One async call after the page cache of `fds` is dropped: how long `start` takes (under `names[0]`), then,
    /// once the work is complete, how long finishing it takes (under `names[1]`).
    pub(crate) fn measure_async(
        &mut self,
        names: [&'static str; 2],
        fds: &[libc::c_int],
        start: impl FnOnce() -> Result<Ticket, PagerError>,
    ) -> Result<(), LabError> {
        self.cache.apply_all(fds)?;
        let t = Instant::now();
        let ticket = start()?;
        self.push(names[0], t.elapsed());
        wait_complete(|| ticket.is_complete());
        let t = Instant::now();
        ticket.finish()?;
        self.push(names[1], t.elapsed());
        self.step_done();
        Ok(())
    }

    /// Says what sample `sample` (of `of`) does now.
    pub(crate) fn phase(&self, sample: usize, of: usize, what: &str) {
        (self.progress)(PagingEvent::Phase(&format!(
            "sample {}/{of}: {what}",
            sample + 1
        )));
    }
}
