//! Verify windows and rewinds on the GPU (issue 26): drafted greedy decode gives plain decode's rows bit for bit, as on the CPU.

use crate::e2e::{argmax, err, prompt};
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu};
use tf_dsv41::cuda::GpuModel;
use tf_dsv41::plan::{self, Backend};
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::{Model, Options};

const STEPS: usize = 48;
/// Odd and even lengths, so windows start and end inside ratio-2 groups.
const LENGTHS: [usize; 4] = [1, 8, 37, 150];

pub(crate) type Rows = Vec<Vec<f32>>;

/// Greedy plain decode after the prompt: each step's logits.
fn plain<B: Backend>(b: &B, lane: &mut B::Lane, p: &[u32]) -> Result<Rows, Error> {
    let mut rows = vec![plan::prefill(b, lane, p, true, &[]).map_err(err)?.expect("last chunk")];
    while rows.len() <= STEPS {
        let t = argmax(rows.last().unwrap());
        rows.push(plan::decode(b, lane, &[t], &[]).map_err(err)?.remove(0));
    }
    Ok(rows)
}

/// One verify window, greedy: its rows up to the first draft that differs from the argmax before it, then a rewind to them; how many it kept.
pub(crate) fn greedy_window<B: Backend>(
    b: &B,
    lane: &mut B::Lane,
    window: &[u32],
    rows: &mut Rows,
) -> Result<usize, Error> {
    let mut keep = 0;
    for (r, row) in plan::verify(b, lane, window, &[]).map_err(err)?.into_iter().enumerate() {
        keep += 1;
        let t = argmax(&row);
        rows.push(row);
        if window.get(r + 1) != Some(&t) {
            break;
        }
    }
    plan::rewind(b, lane, keep).map_err(err)?;
    Ok(keep)
}

/// Greedy decode through verify windows of 1-6 rows whose drafts follow `truth` for a random prefix; (rows, windows cut back).
fn drafted<B: Backend>(
    b: &B,
    lane: &mut B::Lane,
    p: &[u32],
    truth: &[u32],
    rng: &mut SplitMix64,
) -> Result<(Rows, usize), Error> {
    let vocab = b.cfg().vocab_size as u64;
    let mut rows = vec![plan::prefill(b, lane, p, true, &[]).map_err(err)?.expect("last chunk")];
    let mut cut = 0;
    while rows.len() <= STEPS {
        let n = rows.len();
        let (k, good) = ((rng.next_u64() % 6) as usize, (rng.next_u64() % 7) as usize);
        let mut window = vec![argmax(&rows[n - 1])];
        for i in 0..k {
            let right = truth.get(n + i).copied().unwrap_or(0);
            window.push(if i < good {
                right
            } else {
                ((right as u64 + 1 + rng.next_u64() % (vocab - 1)) % vocab) as u32
            });
        }
        let keep = greedy_window(b, lane, &window, &mut rows)?;
        cut += usize::from(keep < window.len());
    }
    rows.truncate(STEPS + 1);
    Ok((rows, cut))
}

/// On `kind`: the GPU's drafted rows equal its plain rows, and the CPU's drafted rows equal the CPU's plain rows.
pub fn check(gpu: &'static Gpu, rng: &mut SplitMix64, report: &mut Report, kind: TinyKind) -> Result<(), Error> {
    let dir = crate::e2e::TempModel::write(&format!("verify-{}", kind.name()), kind)?;
    for replay in [true, false] {
        let opts = Options { replay, ..Options::default() };
        let gm = GpuModel::load(&dir, opts, gpu).map_err(err)?;
        let cpu = Model::load(&dir, opts).map_err(err)?;
        let vocab = gm.cfg().vocab_size;
        for len in LENGTHS {
            let p = prompt(rng, len, vocab);
            let want = plain(&gm, &mut gm.new_lane()?, &p)?;
            let truth: Vec<u32> = want.iter().map(|r| argmax(r)).collect();
            let seed = rng.next_u64();
            let (got, cut) = drafted(&gm, &mut gm.new_lane()?, &p, &truth, &mut SplitMix64::new(seed))?;
            let same = got.iter().zip(&want).filter(|(g, w)| g == w).count();
            let cpu_want = plain(&cpu, &mut cpu.new_state(), &p)?;
            let (cpu_got, _) = drafted(&cpu, &mut cpu.new_state(), &p, &truth, &mut SplitMix64::new(seed))?;
            let cpu_same = cpu_got == cpu_want;
            report.row(
                "verify drafted == plain",
                format!("{} replay {replay} prompt {len}", kind.name()),
                format!(
                    "GPU {same} of {} rows bit-identical, {cut} windows cut back; CPU drafted == plain {cpu_same}",
                    want.len()
                ),
                same == want.len() && cut > 0 && cpu_same,
            );
        }
    }
    Ok(())
}
