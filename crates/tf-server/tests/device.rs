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

/// `--tp N --device cuda:B` puts thread rank r on GPU B + r, for either split.
#[test]
fn gpu_tensor_parallel_ranks_open_their_own_gpus() {
    let dir = tempfile::tempdir().unwrap();
    tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Tiny, 0, dir.path()).unwrap();
    for tp_split_heads in [false, true] {
        let cfg = tf_server::http::serve::ServeConfig {
            tp: 2,
            device: Device::Cuda(98),
            tp_split_heads,
            ..Default::default()
        };
        // Rank 0 goes to GPU 98 and rank 1 to GPU 99, on no machine: the load fails naming the first.
        let err = tf_server::http::tp::load_leader(dir.path(), &cfg, cfg.model_options()).err().expect("no GPU 98");
        assert!(matches!(&err, tf_server::Error::Model(tf_dsv41::Error::OpenGpu { ordinal: 98, .. })), "{err:?}");
    }
}
