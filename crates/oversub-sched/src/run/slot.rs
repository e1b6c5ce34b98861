//! What a component's own work sees in its slot: its buffers, resident, as byte or typed slices, and the time it
//! has left.
//!
//! The executor builds a [`SlotContext`] only after the slot's planned page-ins completed and hands it to the
//! closure registered for the component ([`crate::Runtime::work`]). Borrows of the buffers end with the call;
//! bindings that hand the memory to another runtime (Python's NumPy views) take a [`Lease`], which keeps the
//! buffer from being paged out or freed while it lives.

use oversub_base::sync::lock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a work closure returns: `Ok(())`, or any error, which stops the run with [`crate::RunError::Work`].
pub type WorkResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A misuse of a [`SlotContext`]: a buffer the component does not have, a write to a read-only buffer, a typed
/// view that does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlotError {
    /// The component has no buffer of that name.
    #[error("component {component} has no buffer {name:?} (it has: {known})")]
    UnknownBuffer {
        /// The component.
        component: String,
        /// The name asked for.
        name: String,
        /// The buffers it has, comma separated.
        known: String,
    },
    /// A mutable view of a read-only buffer.
    #[error(
        "buffer {component}.{name} is read-only: ask for it with bytes() or slice(), not mutably"
    )]
    ReadOnly {
        /// The component.
        component: String,
        /// The buffer.
        name: String,
    },
    /// The same buffer asked for twice where one of the views is mutable.
    #[error("buffer {component}.{name} is asked for twice, once mutably")]
    Aliased {
        /// The component.
        component: String,
        /// The buffer.
        name: String,
    },
    /// A typed view whose element does not divide the buffer or whose alignment the buffer lacks.
    #[error("buffer {component}.{name} ({len} bytes) cannot be viewed as {ty}: {why}")]
    Layout {
        /// The component.
        component: String,
        /// The buffer.
        name: String,
        /// Its size in bytes.
        len: usize,
        /// The element type.
        ty: &'static str,
        /// What does not fit.
        why: String,
    },
}

/// Plain numeric types a buffer may be viewed as: every bit pattern is a valid value and there is no padding.
///
/// # Safety
/// An implementor must be `Copy`, have no padding and no invalid bit patterns, so any initialised, aligned bytes of
/// the right length are a valid `[Self]`.
pub unsafe trait Element: Copy + Send + Sync + 'static {
    /// The type's name, for errors.
    const NAME: &'static str;
}

macro_rules! element {
    ($($t:ty),*) => {$(
        // SAFETY: a primitive integer or float: no padding, every bit pattern valid.
        unsafe impl Element for $t {
            const NAME: &'static str = stringify!($t);
        }
    )*};
}
element!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// Counts the leases of one buffer and holds what frees it once the run is over and the last lease is gone.
#[derive(Default)]
pub(crate) struct LeaseCell {
    state: Mutex<LeaseState>,
}

#[derive(Default)]
struct LeaseState {
    count: usize,
    /// Set when the run ended while leases were held: the last one to go frees the buffer.
    release: Option<Box<dyn FnOnce() + Send>>,
}

impl LeaseCell {
    fn lock(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        lock(&self.state)
    }

    /// Leases alive now.
    pub(crate) fn count(&self) -> usize {
        self.lock().count
    }

    /// Runs `release` now when no lease is held, else when the last one drops.
    pub(crate) fn release_when_unleased(&self, release: Box<dyn FnOnce() + Send>) {
        let mut s = self.lock();
        if s.count == 0 {
            drop(s);
            release();
        } else {
            s.release = Some(release);
        }
    }
}

/// Keeps one buffer's memory where it is: while a lease lives, the executor neither pages the buffer out (the run
/// stops with an error instead) nor frees it (freeing waits for the last lease). Bindings take one per view they
/// hand out, so a view that outlives its slot never points at released memory.
pub struct Lease {
    cell: Arc<LeaseCell>,
}

impl Lease {
    pub(crate) fn new(cell: &Arc<LeaseCell>) -> Lease {
        cell.lock().count += 1;
        Lease {
            cell: Arc::clone(cell),
        }
    }
}

impl Clone for Lease {
    fn clone(&self) -> Lease {
        Lease::new(&self.cell)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let release = {
            let mut s = self.cell.lock();
            s.count = s.count.saturating_sub(1);
            if s.count == 0 {
                s.release.take()
            } else {
                None
            }
        };
        if let Some(release) = release {
            release();
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").finish_non_exhaustive()
    }
}

/// One buffer as a slot sees it.
pub(crate) struct SlotBuffer<'a> {
    pub(crate) name: &'a str,
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    pub(crate) read_only: bool,
    pub(crate) lease: &'a Arc<LeaseCell>,
}

/// A buffer's address, length and access, for bindings that build their own views ([`SlotContext::raw`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawBuffer {
    /// First byte; valid for `len` bytes during the slot, and beyond it while a [`Lease`] of the buffer lives.
    pub ptr: *mut u8,
    /// Bytes.
    pub len: usize,
    /// Whether the buffer is read-only (its bytes must not be written).
    pub read_only: bool,
}

/// The context of one slot instance of a component's own work.
pub struct SlotContext<'a> {
    pub(crate) component: &'a str,
    pub(crate) hyperperiod: usize,
    pub(crate) instance: usize,
    pub(crate) planned_start_s: f64,
    pub(crate) deadline_s: f64,
    pub(crate) deadline: Instant,
    pub(crate) buffers: Vec<SlotBuffer<'a>>,
}

impl<'a> SlotContext<'a> {
    /// The component's name.
    pub fn component(&self) -> &str {
        self.component
    }

    /// Which repetition of the table this slot belongs to (0 is the first, warm-up included).
    pub fn hyperperiod(&self) -> usize {
        self.hyperperiod
    }

    /// The how-many-th slot of this component this is, from 0.
    pub fn instance(&self) -> usize {
        self.instance
    }

    /// Planned start of the slot, seconds from the table's start.
    pub fn planned_start_s(&self) -> f64 {
        self.planned_start_s
    }

    /// The end of the slot's window (the next slot's start on the CPU), seconds from the table's start: work that
    /// returns later is a deadline miss.
    pub fn deadline_s(&self) -> f64 {
        self.deadline_s
    }

    /// The end of the window as an instant.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left in the window (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the window has passed: long work checks this and stops early, since the executor never cuts it.
    pub fn overrun(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// The names of the component's buffers, in declaration order.
    pub fn buffer_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.buffers.iter().map(|b| b.name)
    }

    fn find(&self, name: &str) -> Result<usize, SlotError> {
        self.buffers
            .iter()
            .position(|b| b.name == name)
            .ok_or_else(|| SlotError::UnknownBuffer {
                component: self.component.to_string(),
                name: name.to_string(),
                known: self
                    .buffers
                    .iter()
                    .map(|b| b.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    fn writable(&self, i: usize) -> Result<(), SlotError> {
        if self.buffers[i].read_only {
            return Err(SlotError::ReadOnly {
                component: self.component.to_string(),
                name: self.buffers[i].name.to_string(),
            });
        }
        Ok(())
    }

    /// Whether a buffer is read-only.
    pub fn is_read_only(&self, name: &str) -> Result<bool, SlotError> {
        Ok(self.buffers[self.find(name)?].read_only)
    }

    /// A buffer's bytes.
    pub fn bytes(&self, name: &str) -> Result<&[u8], SlotError> {
        let b = &self.buffers[self.find(name)?];
        // SAFETY: the executor made this context from a resident buffer of `len` bytes that nothing else touches
        // during the slot (the plan pages it out only after the slot completes); the borrow ends with `&self`.
        Ok(unsafe { std::slice::from_raw_parts(b.ptr, b.len) })
    }

    /// A read-write buffer's bytes, mutably.
    pub fn bytes_mut(&mut self, name: &str) -> Result<&mut [u8], SlotError> {
        let i = self.find(name)?;
        self.writable(i)?;
        let b = &self.buffers[i];
        // SAFETY: as in `bytes`; `&mut self` makes this the only view of any buffer of the slot.
        Ok(unsafe { std::slice::from_raw_parts_mut(b.ptr, b.len) })
    }

    /// Several buffers at once: `read` as shared slices (a name may repeat), `write` as mutable ones (distinct,
    /// read-write, and not among `read`), e.g. `let ([input], [out]) = slot.access(["in"], ["out"])?;`.
    #[allow(clippy::type_complexity)]
    pub fn access<const R: usize, const W: usize>(
        &mut self,
        read: [&str; R],
        write: [&str; W],
    ) -> Result<([&[u8]; R], [&mut [u8]; W]), SlotError> {
        let r: Vec<usize> = read
            .iter()
            .map(|n| self.find(n))
            .collect::<Result<_, _>>()?;
        let w: Vec<usize> = write
            .iter()
            .map(|n| self.find(n))
            .collect::<Result<_, _>>()?;
        for (k, &i) in w.iter().enumerate() {
            self.writable(i)?;
            if w[..k].contains(&i) || r.contains(&i) {
                return Err(SlotError::Aliased {
                    component: self.component.to_string(),
                    name: self.buffers[i].name.to_string(),
                });
            }
        }
        let bufs = &self.buffers;
        // SAFETY: every index was checked above: mutable slices are of distinct buffers that no shared slice
        // covers, each buffer resident and `len` bytes long for the slot (see `bytes`); the borrows end with
        // `&mut self`.
        let shared = r.map_arr(|i| unsafe { std::slice::from_raw_parts(bufs[i].ptr, bufs[i].len) });
        let unique = w.map_arr(|i| {
            // SAFETY: see above: distinct read-write buffers, not covered by `shared`.
            unsafe { std::slice::from_raw_parts_mut(bufs[i].ptr, bufs[i].len) }
        });
        Ok((shared, unique))
    }

    fn layout<T: Element>(&self, i: usize) -> Result<usize, SlotError> {
        let b = &self.buffers[i];
        let size = std::mem::size_of::<T>();
        let why = if b.len % size != 0 {
            Some(format!("{} is not a multiple of {size}", b.len))
        } else if (b.ptr as usize) % std::mem::align_of::<T>() != 0 {
            Some(format!(
                "its address is not {}-byte aligned",
                std::mem::align_of::<T>()
            ))
        } else {
            None
        };
        match why {
            Some(why) => Err(SlotError::Layout {
                component: self.component.to_string(),
                name: b.name.to_string(),
                len: b.len,
                ty: T::NAME,
                why,
            }),
            None => Ok(b.len / size),
        }
    }

    /// A buffer viewed as a slice of `T` (`f32`, `u8`, …).
    pub fn slice<T: Element>(&self, name: &str) -> Result<&[T], SlotError> {
        let i = self.find(name)?;
        let n = self.layout::<T>(i)?;
        // SAFETY: `layout` checked size and alignment; `T: Element` accepts any bytes; see `bytes`.
        Ok(unsafe { std::slice::from_raw_parts(self.buffers[i].ptr.cast::<T>(), n) })
    }

    /// A read-write buffer viewed as a mutable slice of `T`.
    pub fn slice_mut<T: Element>(&mut self, name: &str) -> Result<&mut [T], SlotError> {
        let i = self.find(name)?;
        self.writable(i)?;
        let n = self.layout::<T>(i)?;
        // SAFETY: as in `slice`; `&mut self` makes this the only view.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.buffers[i].ptr.cast::<T>(), n) })
    }

    /// Several buffers at once as slices of `T`, like [`SlotContext::access`]: e.g.
    /// `let ([w], [x]) = slot.access_slices::<f32, 1, 1>(["weights"], ["state"])?;`.
    #[allow(clippy::type_complexity)]
    pub fn access_slices<T: Element, const R: usize, const W: usize>(
        &mut self,
        read: [&str; R],
        write: [&str; W],
    ) -> Result<([&[T]; R], [&mut [T]; W]), SlotError> {
        for name in read.iter().chain(&write) {
            self.layout::<T>(self.find(name)?)?;
        }
        let (shared, unique) = self.access(read, write)?;
        let size = std::mem::size_of::<T>();
        // SAFETY: `layout` checked every buffer's size and alignment for `T`, and `T: Element` accepts any bytes;
        // the slices keep the borrows `access` checked.
        let shared = shared
            .map(|b| unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<T>(), b.len() / size) });
        let unique = unique.map(|b| {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<T>(), b.len() / size) }
        });
        Ok((shared, unique))
    }

    /// A buffer's address for bindings that build their own views; dereferencing it is `unsafe` and valid only
    /// during the slot or while a [`Lease`] from [`SlotContext::lease`] lives.
    pub fn raw(&self, name: &str) -> Result<RawBuffer, SlotError> {
        let b = &self.buffers[self.find(name)?];
        Ok(RawBuffer {
            ptr: b.ptr,
            len: b.len,
            read_only: b.read_only,
        })
    }

    /// A lease of a buffer: see [`Lease`]. A lease still alive when the work returns stops the run with an error
    /// (the buffer would have to be paged out under a live view), and the buffer is freed when the last one goes.
    pub fn lease(&self, name: &str) -> Result<Lease, SlotError> {
        Ok(Lease::new(self.buffers[self.find(name)?].lease))
    }
}

/// `[T; N].map` over a `Vec` of exactly `N` indices.
trait MapArr {
    fn map_arr<U, const N: usize>(self, f: impl FnMut(usize) -> U) -> [U; N];
}

impl MapArr for Vec<usize> {
    fn map_arr<U, const N: usize>(self, mut f: impl FnMut(usize) -> U) -> [U; N] {
        std::array::from_fn(|k| f(self[k]))
    }
}

impl std::fmt::Debug for SlotContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotContext")
            .field("component", &self.component)
            .field("hyperperiod", &self.hyperperiod)
            .field("instance", &self.instance)
            .field("deadline_s", &self.deadline_s)
            .field(
                "buffers",
                &self.buffers.iter().map(|b| b.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}
