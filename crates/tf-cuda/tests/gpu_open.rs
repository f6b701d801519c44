//! Opening a GPU fails with an error that says what is missing on a machine without one, and works where there is one.

use tf_cuda::{Error, Gpu, kernels, ops};

#[test]
fn open_names_what_is_missing_or_runs_a_kernel() {
    let gpu = match Gpu::open(0) {
        Err(Error::NoDriver) => {
            assert!(Error::NoDriver.to_string().contains("libcuda"));
            return;
        }
        Err(e) => panic!("{e}"),
        Ok(gpu) => gpu,
    };
    let info = gpu.info().unwrap();
    assert_eq!(info.arch, gpu.arch());
    let spec = kernels::RMSNORM.spec(&[]);
    let f = gpu.function(&spec, "rmsnorm_bf16").unwrap();
    assert_eq!(f.cu_function(), gpu.function(&spec, "rmsnorm_bf16").unwrap().cu_function(), "loaded once");
    let one = half::bf16::from_f32(1.0);
    let (x, w) = (gpu.upload(&[one; 64]).unwrap(), gpu.upload(&[one; 32]).unwrap());
    let mut y = gpu.upload(&[half::bf16::NAN; 64]).unwrap();
    ops::rmsnorm_bf16(&gpu, &x, &w, &mut y, 2, 32, 0.0).unwrap();
    assert_eq!(gpu.download::<half::bf16>(&y).unwrap(), vec![one; 64]);
}
