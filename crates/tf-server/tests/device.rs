//! `--device`: parsing, and a CUDA device that cannot be opened fails the load with a message naming it.

use tf_server::http::serve::{Device, load_engine};
use tf_server::lanes::Limits;

#[test]
fn devices_parse_and_bad_ones_are_named() {
    assert_eq!("cpu".parse::<Device>(), Ok(Device::Cpu));
    assert_eq!("cuda".parse::<Device>(), Ok(Device::Cuda(0)));
    assert_eq!("cuda:3".parse::<Device>(), Ok(Device::Cuda(3)));
    for bad in ["gpu", "cuda:", "cuda:x", "CUDA"] {
        let e = bad.parse::<Device>().unwrap_err().to_string();
        assert!(e.contains(bad) && e.contains("cuda:N"), "{bad}: {e}");
    }
}

#[test]
fn a_gpu_that_cannot_be_opened_fails_the_load_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Tiny, 0, dir.path()).unwrap();
    // Ordinal 99 exists on no machine, so this fails with or without a driver.
    let err = load_engine(dir.path(), Limits::default(), tf_dsv41::Options::default(), Device::Cuda(99), false)
        .err()
        .expect("GPU 99 cannot load");
    assert!(
        matches!(&err, tf_server::Error::Model(tf_dsv41::Error::OpenGpu { ordinal: 99, .. })),
        "the GPU's own error, kept whole: {err:?}"
    );
    assert!(err.to_string().starts_with("GPU 99: "), "{err}");
}

/// `--tp N --device cuda` splits the routed experts (its default there); asking it to split heads on GPUs is a usage error.
#[test]
fn gpu_tensor_parallel_splits_experts_and_refuses_heads() {
    let tf = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_tf")).args(args).output().unwrap();
    let out = tf(&["serve", "--tp", "2", "--device", "cuda", "--tp-split", "heads"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--tp-split experts"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Tiny, 0, dir.path()).unwrap();
    let cfg = tf_server::http::serve::ServeConfig {
        tp: 2,
        device: Device::Cuda(98),
        tp_split_heads: false,
        ..Default::default()
    };
    // Rank 0 goes to GPU 98 and rank 1 to GPU 99, on no machine: the load fails naming the first.
    let err = tf_server::http::tp::load_leader(dir.path(), &cfg, cfg.model_options()).err().expect("no GPU 98");
    assert!(matches!(&err, tf_server::Error::Model(tf_dsv41::Error::OpenGpu { ordinal: 98, .. })), "{err:?}");
}
