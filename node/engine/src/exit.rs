//! Leaving the process without running chDB's C++ static destructors.
//!
//! chDB tears down its globals in `exit()` while its own background threads
//! may still run, which can crash the process (SIGSEGV) after all work is
//! done, turning a clean shutdown or a passing test run into a failure.
//! Nothing durable depends on those destructors: inserts are on disk when they
//! return and callers flush before exiting. So once the engine is in use, an
//! exit handler ends the process with `_exit`, keeping the exit status.
//!
//! `exit()` runs handlers in reverse order of registration, and chDB
//! registers destructors lazily (at load, at the first open, insert and
//! query), so the handler is registered again after each of those stages,
//! once per stage: the newest registration runs before chDB's.

use std::sync::atomic::{AtomicBool, Ordering};

extern "C" {
    /// glibc's `on_exit`: like `atexit`, but the handler gets exit()'s status.
    fn on_exit(
        function: extern "C" fn(libc::c_int, *mut libc::c_void),
        arg: *mut libc::c_void,
    ) -> libc::c_int;
}

extern "C" fn leave_with_status(status: libc::c_int, _arg: *mut libc::c_void) {
    // SAFETY: `_exit` ends the process at once with the status `exit()` got;
    // Rust's stdout is flushed by then (it is flushed before `exit` is called
    // by `std::process::exit` and at the end of `main`).
    unsafe { libc::_exit(status) }
}

/// When chDB may have registered new destructors.
#[derive(Debug, Clone, Copy)]
pub enum Stage {
    Open = 0,
    Insert = 1,
    Query = 2,
}

static REGISTERED: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];

/// Registers the exit handler after `stage`, once per stage.
pub fn skip_engine_teardown_after(stage: Stage) {
    if !REGISTERED[stage as usize].swap(true, Ordering::AcqRel) {
        // SAFETY: registering a plain function with no captured state.
        let rc = unsafe { on_exit(leave_with_status, std::ptr::null_mut()) };
        if rc != 0 {
            tracing::warn!(
                ?stage,
                "could not register the exit handler; chDB teardown may crash at exit"
            );
        }
    }
}
