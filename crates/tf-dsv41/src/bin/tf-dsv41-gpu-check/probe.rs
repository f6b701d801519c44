//! Step by step from the CPU's inputs: which op of which block leaves the CPU's result, when the end-to-end gate fails.

use crate::e2e::{err, prompt};
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu};
use tf_dsv41::cuda::GpuModel;
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::{Model, Options};

/// Declared: one step from equal inputs rounds at most a few bf16 ulps apart (≈1 % of the values' RMS).
const STEP_TOL: f64 = 0.02;

pub fn check(gpu: &'static Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let dir = crate::e2e::TempModel::write("probe", TinyKind::Tiny)?;
    let opts = Options { replay: false, ..Options::default() };
    let cpu = Model::load(&dir, opts).map_err(err)?;
    let gm = GpuModel::from_cpu(Model::load(&dir, opts).map_err(err)?, gpu)?;
    for n in [1, 40] {
        let rows = gm.probe(&cpu, &prompt(rng, n, gm.cfg().vocab_size)).map_err(err)?;
        for r in rows {
            report.row(
                "probe step",
                format!("tiny, {n} rows: {}", r.step),
                format!("{:.3e} of RMS", r.diff),
                r.diff <= STEP_TOL,
            );
        }
    }
    Ok(())
}
