//! Without NCCL (CI has none), the NCCL communicator fails with a message that says where it looked and how to point it elsewhere.

#[test]
fn a_missing_nccl_is_a_clear_error_naming_the_path_tried() {
    // SAFETY: this test binary runs this one test, before anything reads the environment.
    unsafe { std::env::set_var("TF_NCCL_LIB", "/nonexistent/libnccl.so.2") };
    let e = tf_collective::nccl::version().unwrap_err();
    assert!(e.contains("/nonexistent/libnccl.so.2") && e.contains("TF_NCCL_LIB"), "{e}");
    let e = tf_collective::nccl::unique_id().err().expect("no NCCL, no id");
    assert!(e.contains("NCCL not found"), "{e}");
    let id = tf_collective::nccl::UniqueId::default();
    let e = tf_collective::NcclComm::new(0, 0, 1, id, None).err().expect("no NCCL, no communicator");
    assert!(e.contains("NCCL not found"), "{e}");
}
