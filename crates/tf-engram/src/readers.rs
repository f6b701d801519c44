//! One process-wide pool of Engram reader threads, shared by every read-ahead (bounded threads, however many prompts).

use crossbeam_channel::{Receiver, Sender, unbounded};
use parking_lot::Mutex;
use std::sync::OnceLock;

type Task = Box<dyn FnOnce() + Send>;

/// A multi-consumer channel (crossbeam), so idle readers wait on it directly instead of on a lock around std's receiver.
struct Pool {
    tx: Sender<Task>,
    rx: Receiver<Task>,
    threads: Mutex<usize>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = unbounded();
        Pool { tx, rx, threads: Mutex::new(0) }
    })
}

/// Grows the pool to at least `n` readers (it never shrinks: the largest parallelism any read-ahead asked for).
pub(crate) fn ensure(n: usize) {
    let p = pool();
    let mut have = p.threads.lock();
    while *have < n {
        let rx = p.rx.clone();
        let spawned = std::thread::Builder::new().name("engram-reader".into()).spawn(move || {
            // A panicking read drops its reply sender (its fetch fails), and the reader lives on.
            while let Ok(t) = rx.recv() {
                drop(std::panic::catch_unwind(std::panic::AssertUnwindSafe(t)));
            }
        });
        if spawned.is_err() {
            // Fewer readers than asked still make progress; at least one exists unless the first spawn failed.
            break;
        }
        *have += 1;
    }
}

/// Readers in the pool now.
pub fn reader_threads() -> usize {
    *pool().threads.lock()
}

/// Runs `task` on a pool reader (the caller grew the pool first); with none (none could start) the task is dropped, and its waiter does the work.
pub(crate) fn submit(task: impl FnOnce() + Send + 'static) {
    if reader_threads() > 0 {
        let _ = pool().tx.send(Box::new(task));
    }
}
