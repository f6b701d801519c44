//! One process-wide pool of Engram reader threads, shared by every read-ahead (bounded threads, however many prompts).

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

type Task = Box<dyn FnOnce() + Send>;

struct Pool {
    tx: Mutex<Sender<Task>>,
    rx: Arc<Mutex<Receiver<Task>>>,
    threads: Mutex<usize>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = channel();
        Pool { tx: Mutex::new(tx), rx: Arc::new(Mutex::new(rx)), threads: Mutex::new(0) }
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Grows the pool to at least `n` readers (it never shrinks: the largest parallelism any read-ahead asked for).
pub(crate) fn ensure(n: usize) {
    let p = pool();
    let mut have = lock(&p.threads);
    while *have < n {
        let rx = p.rx.clone();
        let spawned = std::thread::Builder::new().name("engram-reader".into()).spawn(move || {
            loop {
                // The lock is held only while taking a task, so readers run their reads in parallel.
                let task = lock(&rx).recv();
                match task {
                    // A panicking read drops its reply sender (its fetch fails), and the reader lives on.
                    Ok(t) => drop(std::panic::catch_unwind(std::panic::AssertUnwindSafe(t))),
                    Err(_) => return,
                }
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
    *lock(&pool().threads)
}

/// Runs `task` on a pool reader (the caller grew the pool first); with none (none could start) the task is dropped, and its waiter does the work.
pub(crate) fn submit(task: impl FnOnce() + Send + 'static) {
    if reader_threads() > 0 {
        let _ = lock(&pool().tx).send(Box::new(task));
    }
}
