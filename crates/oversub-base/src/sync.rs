//! Poison-tolerant locking, in one place.
//!
//! oversub's shared state stays consistent at every point where a panic could unwind (updates are single
//! assignments or are rolled back by the caller's error path), so a poisoned lock carries no torn data: every
//! crate takes the guard anyway rather than propagating a panic from another thread into library code.

use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::time::Duration;

/// Locks `m`, taking the guard even if another thread panicked while holding it.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Read-locks `l`, tolerating poison.
pub fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Write-locks `l`, tolerating poison.
pub fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `cv`, tolerating poison.
pub fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `cv` while `condition` holds, tolerating poison.
pub fn wait_while<'a, T, F>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    condition: F,
) -> MutexGuard<'a, T>
where
    F: FnMut(&mut T) -> bool,
{
    cv.wait_while(guard, condition)
        .unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `cv` for at most `timeout`, tolerating poison; the flag is true when the wait timed out.
pub fn wait_timeout<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, bool) {
    let (guard, result) = cv
        .wait_timeout(guard, timeout)
        .unwrap_or_else(PoisonError::into_inner);
    (guard, result.timed_out())
}

/// Waits on `cv` while `condition` holds, for at most `timeout`; the flag is true when it timed out with the
/// condition still holding.
pub fn wait_timeout_while<'a, T, F>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
    condition: F,
) -> (MutexGuard<'a, T>, bool)
where
    F: FnMut(&mut T) -> bool,
{
    let (guard, result) = cv
        .wait_timeout_while(guard, timeout, condition)
        .unwrap_or_else(PoisonError::into_inner);
    (guard, result.timed_out())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let m = Arc::new(Mutex::new(5));
        let m2 = Arc::clone(&m);
        let _ = std::thread::spawn(move || {
            let _g = lock(&m2);
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 5);
    }

    #[test]
    fn timed_wait_reports_the_timeout() {
        let m = Mutex::new(false);
        let cv = Condvar::new();
        let (g, timed_out) =
            wait_timeout_while(&cv, lock(&m), Duration::from_millis(1), |done| !*done);
        assert!(timed_out);
        assert!(!*g);
    }
}
