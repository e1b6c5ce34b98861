//! The pager: accelerator buffers paged whole between device memory and a swap store.
//!
//! A [`Pool`] of fixed capacity hands out buffers to [`AddressSpace`]s. Any buffer, or all buffers of a space, can be
//! paged out to the pool's [`SwapStore`](oversub_io::SwapStore) and back in, synchronously or asynchronously
//! (start, then [`Ticket::finish`]). A buffer keeps its device address across a page-out/page-in cycle, and its
//! memory is really given back while it is out. Read-only buffers are written to the store once. Each address space
//! has its own lock; the only global state (capacity accounting, store slots) is atomics or a short lock.

mod error;
mod pool;
mod space;

pub use error::PagerError;
pub use pool::{Pool, PoolConfig, PoolStats};
pub use space::{AddressSpace, Buffer, BufferFlags, BufferInfo, BufferState, OpKind, Ticket};
