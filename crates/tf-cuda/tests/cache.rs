//! Kernel cache keys change with source, target, defines and compiler, and with nothing else.

use tf_cuda::{Arch, KernelSpec, cache_key};

fn spec(src: &str, defines: &[(&str, &str)]) -> KernelSpec<'static> {
    KernelSpec::new(
        "rmsnorm",
        Box::leak(src.to_string().into_boxed_str()),
        defines.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    )
}

#[test]
fn compile_time_hash_equals_runtime_hash() {
    const SRC: &str = "extern \"C\" __global__ void k() {}";
    const K: tf_cuda::KernelSource = tf_cuda::KernelSource::new("k", SRC);
    assert_eq!(K.spec(&[]).source_hash(), KernelSpec::new("k", SRC, vec![]).source_hash());
    assert_ne!(K.spec(&[]).source_hash(), KernelSpec::new("k", "other", vec![]).source_hash());
    assert_eq!(
        cache_key(&K.spec(&[]), Arch::Sm90a, "13.0"),
        cache_key(&KernelSpec::new("k", SRC, vec![]), Arch::Sm90a, "13.0")
    );
}

#[test]
fn key_tracks_every_input() {
    let base = cache_key(&spec("a", &[("D", "512")]), Arch::Sm90a, "13.0");
    assert_eq!(base, cache_key(&spec("a", &[("D", "512")]), Arch::Sm90a, "13.0"), "stable");
    assert!(base.starts_with("rmsnorm-sm_90a-"));
    assert_ne!(base, cache_key(&spec("b", &[("D", "512")]), Arch::Sm90a, "13.0"));
    assert_ne!(base, cache_key(&spec("a", &[("D", "256")]), Arch::Sm90a, "13.0"));
    assert_ne!(base, cache_key(&spec("a", &[("D", "512")]), Arch::Sm121a, "13.0"));
    assert_ne!(base, cache_key(&spec("a", &[("D", "512")]), Arch::Sm90a, "13.1"));
    let two = cache_key(&spec("a", &[("A", "1"), ("B", "2")]), Arch::Sm90a, "13.0");
    assert_eq!(
        two,
        cache_key(&spec("a", &[("B", "2"), ("A", "1")]), Arch::Sm90a, "13.0"),
        "define order is irrelevant"
    );
    assert_ne!(
        cache_key(&spec("a", &[("A", "1B=2")]), Arch::Sm90a, "13.0"),
        cache_key(&spec("a", &[("A", "1"), ("B", "2")]), Arch::Sm90a, "13.0"),
        "parts are separated"
    );
}

#[test]
fn arch_names_and_capabilities() {
    assert_eq!(Arch::Sm90a.to_string(), "sm_90a");
    assert_eq!(Arch::Sm121a.to_string(), "sm_121a");
    assert_eq!("sm_121a".parse::<Arch>(), Ok(Arch::Sm121a));
    let err = "sm_80".parse::<Arch>().unwrap_err();
    assert_eq!(err.given, "sm_80");
    assert!(err.to_string().contains("sm_90a"), "{err}");
    assert_eq!(Arch::for_capability(9, 0), Some(Arch::Sm90a));
    assert_eq!(Arch::for_capability(8, 0), None);
    assert_eq!(Arch::Sm90a.nvrtc_flag(), "--gpu-architecture=sm_90a");
}
