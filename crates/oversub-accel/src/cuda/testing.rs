//! A fake of the CUDA driver for tests without a GPU: device memory is emulated in host memory, copies are queued
//! per stream and carried out only when the program waits for them (a stream or context synchronisation, or an
//! event it waits on or polls), which is the latest a real GPU may run them. Every call is recorded, and every
//! breach of the driver's rules is noted as a violation instead of corrupting memory:
//! - a copy queued on memory that is not mapped with access granted ("copy-in before the map"),
//! - an unmap, release or address free while a queued copy still touches the memory ("unmap before the copy-out
//!   finished"),
//! - a pinned host buffer freed while a copy into or out of it is queued,
//! - an address range freed with memory still mapped in it.
//!
//! Calls can be made to fail ([`FakeDriver::fail_call`]) and device memory is limited, so error paths are tested too.

use oversub_base::mem::{AlignedBuf, AllocError};
use oversub_base::sync::lock;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use super::driver::{
    CudaDriver, DeviceAddr, DeviceInfo, DriverError, EventHandle, PhysHandle, StreamHandle,
};

/// One recorded driver call (or the completion of a queued copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `cuMemAddressReserve`.
    AddressReserve { addr: DeviceAddr, len: usize },
    /// `cuMemAddressFree`.
    AddressFree { addr: DeviceAddr, len: usize },
    /// `cuMemCreate`.
    MemCreate { handle: u64, len: usize },
    /// `cuMemRelease`.
    MemRelease { handle: u64 },
    /// `cuMemMap`.
    MemMap {
        addr: DeviceAddr,
        len: usize,
        handle: u64,
    },
    /// `cuMemSetAccess`.
    MemSetAccess { addr: DeviceAddr, len: usize },
    /// `cuMemUnmap`.
    MemUnmap { addr: DeviceAddr, len: usize },
    /// A device-to-host copy was queued.
    CopyOutQueued {
        src: DeviceAddr,
        len: usize,
        stream: u64,
    },
    /// A host-to-device copy was queued.
    CopyInQueued {
        dst: DeviceAddr,
        len: usize,
        stream: u64,
    },
    /// A queued device-to-host copy was carried out.
    CopyOutDone { src: DeviceAddr, len: usize },
    /// A queued host-to-device copy was carried out.
    CopyInDone { dst: DeviceAddr, len: usize },
    /// A fill was queued.
    FillQueued {
        dst: DeviceAddr,
        len: usize,
        stream: u64,
    },
    /// `cuMemHostAlloc`.
    HostAlloc { len: usize },
    /// `cuMemFreeHost`.
    HostFree,
    /// `cuStreamSynchronize`.
    StreamSync { stream: u64 },
    /// `cuCtxSynchronize`.
    CtxSync,
    /// `cuEventRecord`.
    EventRecord { event: u64, stream: u64 },
    /// `cuEventSynchronize`.
    EventSync { event: u64 },
}

#[derive(Debug)]
enum Op {
    CopyOut {
        dst: usize,
        src: DeviceAddr,
        len: usize,
    },
    CopyIn {
        dst: DeviceAddr,
        src: usize,
        len: usize,
    },
    Fill {
        dst: DeviceAddr,
        value: u8,
        len: usize,
    },
    Event(u64),
}

#[derive(Debug, Default)]
struct State {
    next_addr: u64,
    next_handle: u64,
    reservations: BTreeMap<DeviceAddr, usize>,
    allocations: HashMap<u64, Vec<u8>>,
    /// address -> (length, handle, access granted)
    mappings: BTreeMap<DeviceAddr, (usize, u64, bool)>,
    used_bytes: u64,
    streams: HashMap<u64, VecDeque<Op>>,
    /// event -> stream it was last recorded on, while that record is pending
    pending_events: HashMap<u64, u64>,
    events: u64,
    /// "Pinned" host memory by address: the house's aligned buffers, freed when removed (or with the fake).
    pinned: HashMap<usize, AlignedBuf>,
    calls: Vec<Call>,
    violations: Vec<String>,
    /// call name -> (calls seen, fail at these counts)
    failures: HashMap<&'static str, (u64, Vec<u64>)>,
    polls_before_ready: u32,
    polls: HashMap<u64, u32>,
}

/// The fake driver. See the module documentation.
#[derive(Debug)]
pub struct FakeDriver {
    info: DeviceInfo,
    state: Mutex<State>,
}

fn overlaps(a: DeviceAddr, alen: usize, b: DeviceAddr, blen: usize) -> bool {
    a < b + blen as u64 && b < a + alen as u64
}

impl FakeDriver {
    /// A device of `total_bytes` with allocation granularity `granularity_bytes`.
    pub fn new(total_bytes: u64, granularity_bytes: usize) -> FakeDriver {
        FakeDriver {
            info: DeviceInfo {
                name: "oversub fake GPU".into(),
                ordinal: 0,
                driver_version: 12080,
                total_bytes,
                vmm_supported: true,
                granularity_bytes,
                greatest_stream_priority: -5,
            },
            state: Mutex::new(State {
                next_addr: 0x7f00_0000_0000,
                next_handle: 1,
                ..State::default()
            }),
        }
    }

    /// The same device, reporting no virtual-memory management support.
    pub fn without_vmm(mut self) -> FakeDriver {
        self.info.vmm_supported = false;
        self
    }

    /// Event queries report "not ready" this many times before the copies behind an event run (default 0), so
    /// polling loops are exercised.
    pub fn polls_before_ready(&self, n: u32) {
        self.lock().polls_before_ready = n;
    }

    /// Makes the `nth` (1-based, counted from now on) call of `call` (`"cuMemCreate"`, `"cuMemcpyDtoHAsync"`, ...)
    /// fail.
    pub fn fail_call(&self, call: &'static str, nth: u64) {
        let mut st = self.lock();
        let entry = st.failures.entry(call).or_insert((0, Vec::new()));
        let at = entry.0 + nth;
        entry.1.push(at);
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Breaches of the driver's rules so far (empty when the backend behaved).
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// Device bytes held by physical allocations now.
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes
    }

    /// Live address reservations, mappings and physical allocations now.
    pub fn live(&self) -> (usize, usize, usize) {
        let st = self.lock();
        (
            st.reservations.len(),
            st.mappings.len(),
            st.allocations.len(),
        )
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Counts a call and fails it if asked to.
    fn enter(st: &mut State, call: &'static str) -> Result<(), DriverError> {
        if let Some((seen, at)) = st.failures.get_mut(call) {
            *seen += 1;
            if let Some(i) = at.iter().position(|n| n == seen) {
                at.swap_remove(i);
                return Err(DriverError {
                    call,
                    code: if call == "cuMemCreate" {
                        DriverError::OUT_OF_MEMORY
                    } else {
                        999
                    },
                    name: if call == "cuMemCreate" {
                        "CUDA_ERROR_OUT_OF_MEMORY".into()
                    } else {
                        "CUDA_ERROR_UNKNOWN (injected)".into()
                    },
                });
            }
        }
        Ok(())
    }

    fn invalid(call: &'static str) -> DriverError {
        DriverError {
            call,
            code: 1,
            name: "CUDA_ERROR_INVALID_VALUE".into(),
        }
    }

    /// The mapping holding `[addr, addr + len)` with access granted: (mapping start, handle).
    fn mapped(st: &State, addr: DeviceAddr, len: usize) -> Option<(DeviceAddr, u64)> {
        st.mappings
            .range(..=addr)
            .next_back()
            .filter(|(&start, &(mlen, _, access))| {
                access && addr + len as u64 <= start + mlen as u64
            })
            .map(|(&start, &(_, h, _))| (start, h))
    }

    /// Whether a queued copy touches device memory `[addr, addr + len)`.
    fn device_busy(st: &State, addr: DeviceAddr, len: usize) -> bool {
        st.streams.values().flatten().any(|op| match *op {
            Op::CopyOut { src, len: n, .. } => overlaps(src, n, addr, len),
            Op::CopyIn { dst, len: n, .. } => overlaps(dst, n, addr, len),
            Op::Fill { dst, len: n, .. } => overlaps(dst, n, addr, len),
            Op::Event(_) => false,
        })
    }

    /// Whether a queued copy touches host memory starting at `ptr`.
    fn host_busy(st: &State, ptr: usize, len: usize) -> bool {
        st.streams.values().flatten().any(|op| match *op {
            Op::CopyOut { dst, len: n, .. } => dst < ptr + len && ptr < dst + n,
            Op::CopyIn { src, len: n, .. } => src < ptr + len && ptr < src + n,
            Op::Fill { .. } | Op::Event(_) => false,
        })
    }

    /// Carries out the queued operations of `stream`, up to and including `until` (an event), or all.
    fn run_stream(st: &mut State, stream: u64, until: Option<u64>) {
        loop {
            let Some(op) = st.streams.get_mut(&stream).and_then(VecDeque::pop_front) else {
                return;
            };
            match op {
                Op::Event(e) => {
                    st.pending_events.remove(&e);
                    if until == Some(e) {
                        return;
                    }
                }
                Op::CopyOut { dst, src, len } => {
                    match Self::mapped(st, src, len) {
                        Some((start, h)) => {
                            if let Some(mem) = st.allocations.get(&h) {
                                let off = (src - start) as usize;
                                // SAFETY: the caller of memcpy_dtoh_async promised `dst` valid and untouched for
                                // `len` bytes until this copy completes, which is now.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(
                                        mem[off..].as_ptr(),
                                        dst as *mut u8,
                                        len,
                                    )
                                };
                            }
                        }
                        None => st.violations.push(format!(
                            "copy-out of {src:#x} (+{len}) ran after its memory was unmapped"
                        )),
                    }
                    st.calls.push(Call::CopyOutDone { src, len });
                }
                Op::Fill { dst, value, len } => match Self::mapped(st, dst, len) {
                    Some((start, h)) => {
                        if let Some(mem) = st.allocations.get_mut(&h) {
                            let off = (dst - start) as usize;
                            mem[off..off + len].fill(value);
                        }
                    }
                    None => st.violations.push(format!(
                        "fill of {dst:#x} (+{len}) ran after its memory was unmapped"
                    )),
                },
                Op::CopyIn { dst, src, len } => {
                    match Self::mapped(st, dst, len) {
                        Some((start, h)) => {
                            if let Some(mem) = st.allocations.get_mut(&h) {
                                let off = (dst - start) as usize;
                                // SAFETY: the caller of memcpy_htod_async promised `src` valid and unchanged for
                                // `len` bytes until this copy completes, which is now.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(
                                        src as *const u8,
                                        mem[off..].as_mut_ptr(),
                                        len,
                                    )
                                };
                            }
                        }
                        None => st.violations.push(format!(
                            "copy-in to {dst:#x} (+{len}) ran after its memory was unmapped"
                        )),
                    }
                    st.calls.push(Call::CopyInDone { dst, len });
                }
            }
        }
    }

    fn run_all(st: &mut State) {
        let streams: Vec<u64> = st.streams.keys().copied().collect();
        for s in streams {
            Self::run_stream(st, s, None);
        }
    }
}

// SAFETY: the fake keeps the driver's contract: reserved ranges never overlap, copies complete no later than the
// waits that cover them, and memory it hands out is valid until freed.
unsafe impl CudaDriver for FakeDriver {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn make_current(&self) -> Result<(), DriverError> {
        Ok(())
    }

    fn mem_get_info(&self) -> Result<(u64, u64), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemGetInfo")?;
        Ok((self.info.total_bytes - st.used_bytes, self.info.total_bytes))
    }

    fn address_reserve(&self, len: usize, align: usize) -> Result<DeviceAddr, DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemAddressReserve")?;
        if len == 0 || len % self.info.granularity_bytes != 0 {
            return Err(Self::invalid("cuMemAddressReserve"));
        }
        let align = align.max(self.info.granularity_bytes) as u64;
        let addr = st.next_addr.next_multiple_of(align);
        // A guard granule between ranges, so an overrun is never silently inside the next range.
        st.next_addr = addr + len as u64 + self.info.granularity_bytes as u64;
        st.reservations.insert(addr, len);
        st.calls.push(Call::AddressReserve { addr, len });
        Ok(addr)
    }

    unsafe fn address_free(&self, addr: DeviceAddr, len: usize) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemAddressFree")?;
        if st.reservations.get(&addr) != Some(&len) {
            return Err(Self::invalid("cuMemAddressFree"));
        }
        if st
            .mappings
            .keys()
            .any(|&m| m >= addr && m < addr + len as u64)
        {
            st.violations.push(format!(
                "address range {addr:#x} freed with memory still mapped in it"
            ));
        }
        st.reservations.remove(&addr);
        st.calls.push(Call::AddressFree { addr, len });
        Ok(())
    }

    fn mem_create(&self, len: usize) -> Result<PhysHandle, DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemCreate")?;
        if len == 0 || len % self.info.granularity_bytes != 0 {
            return Err(Self::invalid("cuMemCreate"));
        }
        if st.used_bytes + len as u64 > self.info.total_bytes {
            return Err(DriverError {
                call: "cuMemCreate",
                code: DriverError::OUT_OF_MEMORY,
                name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            });
        }
        let handle = st.next_handle;
        st.next_handle += 1;
        // Fresh device memory holds garbage, not zeros: a copy that never ran must not look right.
        st.allocations.insert(handle, vec![0xA5; len]);
        st.used_bytes += len as u64;
        st.calls.push(Call::MemCreate { handle, len });
        Ok(PhysHandle(handle))
    }

    unsafe fn mem_release(&self, handle: PhysHandle) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemRelease")?;
        if st.mappings.values().any(|&(_, h, _)| h == handle.0) {
            st.violations.push(format!(
                "allocation {} released while still mapped",
                handle.0
            ));
        }
        let Some(mem) = st.allocations.remove(&handle.0) else {
            return Err(Self::invalid("cuMemRelease"));
        };
        st.used_bytes -= mem.len() as u64;
        st.calls.push(Call::MemRelease { handle: handle.0 });
        Ok(())
    }

    unsafe fn mem_map(
        &self,
        addr: DeviceAddr,
        len: usize,
        handle: PhysHandle,
    ) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemMap")?;
        let in_reservation = st
            .reservations
            .range(..=addr)
            .next_back()
            .is_some_and(|(&start, &rlen)| addr + len as u64 <= start + rlen as u64);
        let free = !st
            .mappings
            .iter()
            .any(|(&m, &(mlen, _, _))| overlaps(m, mlen, addr, len));
        let sized = st
            .allocations
            .get(&handle.0)
            .is_some_and(|m| m.len() == len);
        if !in_reservation || !free || !sized {
            return Err(Self::invalid("cuMemMap"));
        }
        st.mappings.insert(addr, (len, handle.0, false));
        st.calls.push(Call::MemMap {
            addr,
            len,
            handle: handle.0,
        });
        Ok(())
    }

    unsafe fn mem_set_access(&self, addr: DeviceAddr, len: usize) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemSetAccess")?;
        match st.mappings.get_mut(&addr) {
            Some(m) if m.0 == len => m.2 = true,
            _ => return Err(Self::invalid("cuMemSetAccess")),
        }
        st.calls.push(Call::MemSetAccess { addr, len });
        Ok(())
    }

    unsafe fn mem_unmap(&self, addr: DeviceAddr, len: usize) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemUnmap")?;
        if st.mappings.get(&addr).map(|m| m.0) != Some(len) {
            return Err(Self::invalid("cuMemUnmap"));
        }
        if Self::device_busy(&st, addr, len) {
            st.violations.push(format!(
                "unmap of {addr:#x} (+{len}) before the copy-out finished: a queued copy still touches it"
            ));
        }
        st.mappings.remove(&addr);
        st.calls.push(Call::MemUnmap { addr, len });
        Ok(())
    }

    fn host_alloc_pinned(&self, len: usize) -> Result<*mut u8, DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemHostAlloc")?;
        let buf = AlignedBuf::new(len.max(1), 4096).map_err(|e| match e {
            AllocError::OutOfMemory { .. } => DriverError {
                call: "cuMemHostAlloc",
                code: DriverError::OUT_OF_MEMORY,
                name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            },
            _ => Self::invalid("cuMemHostAlloc"),
        })?;
        let ptr = buf.as_ptr();
        st.pinned.insert(ptr as usize, buf);
        st.calls.push(Call::HostAlloc { len });
        Ok(ptr)
    }

    unsafe fn host_free_pinned(&self, ptr: *mut u8) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemFreeHost")?;
        let Some(len) = st.pinned.get(&(ptr as usize)).map(AlignedBuf::len) else {
            return Err(Self::invalid("cuMemFreeHost"));
        };
        if Self::host_busy(&st, ptr as usize, len) {
            st.violations
                .push("pinned host memory freed while a queued copy still uses it".into());
            // Keep it allocated: freeing would let the queued copy write freed memory.
            return Ok(());
        }
        // Dropping the buffer frees it, once: it is no longer in the table.
        st.pinned.remove(&(ptr as usize));
        st.calls.push(Call::HostFree);
        Ok(())
    }

    fn stream_create(&self, _priority: i32) -> Result<StreamHandle, DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuStreamCreateWithPriority")?;
        let id = st.next_handle;
        st.next_handle += 1;
        st.streams.insert(id, VecDeque::new());
        Ok(StreamHandle(id))
    }

    unsafe fn stream_destroy(&self, stream: StreamHandle) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuStreamDestroy")?;
        Self::run_stream(&mut st, stream.0, None);
        st.streams
            .remove(&stream.0)
            .map(|_| ())
            .ok_or_else(|| Self::invalid("cuStreamDestroy"))
    }

    fn stream_synchronize(&self, stream: StreamHandle) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuStreamSynchronize")?;
        if !st.streams.contains_key(&stream.0) {
            return Err(Self::invalid("cuStreamSynchronize"));
        }
        Self::run_stream(&mut st, stream.0, None);
        st.calls.push(Call::StreamSync { stream: stream.0 });
        Ok(())
    }

    fn ctx_synchronize(&self) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuCtxSynchronize")?;
        Self::run_all(&mut st);
        st.calls.push(Call::CtxSync);
        Ok(())
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DeviceAddr,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemcpyDtoHAsync")?;
        if !st.streams.contains_key(&stream.0) || dst.is_null() {
            return Err(Self::invalid("cuMemcpyDtoHAsync"));
        }
        if Self::mapped(&st, src, len).is_none() {
            st.violations.push(format!(
                "copy-out queued from {src:#x} (+{len}), which is not mapped with access granted"
            ));
            return Err(Self::invalid("cuMemcpyDtoHAsync"));
        }
        st.calls.push(Call::CopyOutQueued {
            src,
            len,
            stream: stream.0,
        });
        if let Some(q) = st.streams.get_mut(&stream.0) {
            q.push_back(Op::CopyOut {
                dst: dst as usize,
                src,
                len,
            });
        }
        Ok(())
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemcpyHtoDAsync")?;
        if !st.streams.contains_key(&stream.0) || src.is_null() {
            return Err(Self::invalid("cuMemcpyHtoDAsync"));
        }
        if Self::mapped(&st, dst, len).is_none() {
            st.violations.push(format!(
                "copy-in before the map: queued to {dst:#x} (+{len}), which is not mapped with access granted"
            ));
            return Err(Self::invalid("cuMemcpyHtoDAsync"));
        }
        st.calls.push(Call::CopyInQueued {
            dst,
            len,
            stream: stream.0,
        });
        if let Some(q) = st.streams.get_mut(&stream.0) {
            q.push_back(Op::CopyIn {
                dst,
                src: src as usize,
                len,
            });
        }
        Ok(())
    }

    unsafe fn memset_d8_async(
        &self,
        dst: DeviceAddr,
        value: u8,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuMemsetD8Async")?;
        if !st.streams.contains_key(&stream.0) {
            return Err(Self::invalid("cuMemsetD8Async"));
        }
        if Self::mapped(&st, dst, len).is_none() {
            st.violations.push(format!(
                "fill queued on {dst:#x} (+{len}), which is not mapped with access granted"
            ));
            return Err(Self::invalid("cuMemsetD8Async"));
        }
        st.calls.push(Call::FillQueued {
            dst,
            len,
            stream: stream.0,
        });
        if let Some(q) = st.streams.get_mut(&stream.0) {
            q.push_back(Op::Fill { dst, value, len });
        }
        Ok(())
    }

    fn event_create(&self) -> Result<EventHandle, DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuEventCreate")?;
        st.events += 1;
        let id = st.next_handle;
        st.next_handle += 1;
        Ok(EventHandle(id))
    }

    unsafe fn event_destroy(&self, _event: EventHandle) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuEventDestroy")?;
        st.events = st.events.saturating_sub(1);
        Ok(())
    }

    fn event_record(&self, event: EventHandle, stream: StreamHandle) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuEventRecord")?;
        let Some(q) = st.streams.get_mut(&stream.0) else {
            return Err(Self::invalid("cuEventRecord"));
        };
        q.push_back(Op::Event(event.0));
        st.pending_events.insert(event.0, stream.0);
        st.polls.insert(event.0, 0);
        st.calls.push(Call::EventRecord {
            event: event.0,
            stream: stream.0,
        });
        Ok(())
    }

    fn event_query(&self, event: EventHandle) -> Result<bool, DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuEventQuery")?;
        let Some(&stream) = st.pending_events.get(&event.0) else {
            return Ok(true);
        };
        let limit = st.polls_before_ready;
        let polls = st.polls.entry(event.0).or_insert(0);
        if *polls < limit {
            *polls += 1;
            return Ok(false);
        }
        Self::run_stream(&mut st, stream, Some(event.0));
        Ok(true)
    }

    fn event_synchronize(&self, event: EventHandle) -> Result<(), DriverError> {
        let mut st = self.lock();
        Self::enter(&mut st, "cuEventSynchronize")?;
        if let Some(&stream) = st.pending_events.get(&event.0) {
            Self::run_stream(&mut st, stream, Some(event.0));
        }
        st.calls.push(Call::EventSync { event: event.0 });
        Ok(())
    }
}
