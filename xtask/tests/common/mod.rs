//! Shared by xtask's tests that drive a server: the tiny or the default model served on a free loopback port.

// Each test crate uses some of these helpers, so the others are dead code there.
#![allow(dead_code)]

use std::time::{Duration, Instant};
use tf_server::http::serve::{ServeConfig, spawn_loopback};

/// Serves the tiny model on a free loopback port (as tf-server's tests do) and waits for `/health`.
pub fn serve(dir: &std::path::Path) -> String {
    serve_seed(dir, 0)
}

/// Serves what `tf serve` serves with no `--model`: the shipped gate model.
pub fn serve_default() -> String {
    healthy(spawn_loopback(ServeConfig::default()).unwrap())
}

/// Serves `cfg` (its model: the shipped gate model unless it names one).
pub fn serve_config(cfg: ServeConfig) -> String {
    healthy(spawn_loopback(cfg).unwrap())
}

fn healthy(addr: std::net::SocketAddr) -> String {
    let base = format!("http://{addr}");
    let t = Instant::now();
    while ureq::get(&format!("{base}/health")).call().map(|r| r.status().as_u16()).unwrap_or(0) != 200 {
        assert!(t.elapsed() < Duration::from_secs(120), "server never became healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    base
}

/// `serve` with the tiny model of another seed (other weights, the same shapes).
pub fn serve_seed(dir: &std::path::Path, seed: u64) -> String {
    tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Tiny, seed, dir).unwrap();
    let cfg = ServeConfig { model_dir: Some(dir.to_path_buf()), ..ServeConfig::default() };
    healthy(spawn_loopback(cfg).unwrap())
}
