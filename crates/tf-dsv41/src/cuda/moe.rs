//! MoE on the GPU (dsv41 §9): router, routed FP4 experts in one launch per projection, FP8 shared expert, ordered sum.

use super::layer::GMoe;
use super::model::GpuModel;
use super::ops::{self, Io};
use super::weights::{Acts, Buf, Normed};
use tf_cuda::Error;

impl GpuModel {
    /// The MoE of `rows` normed bf16 rows (with their FP8 codes where the norm wrote them); bf16 `[rows, dim]`.
    pub(crate) fn moe(&self, m: &GMoe, normed: &Normed, rows: usize) -> Result<Buf, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let x = &normed.x;
        let (dim, inter, topk, experts) = (cfg.dim, cfg.moe_inter_dim, m.topk, m.experts);
        let logits = self.phase("moe: gate", || m.gate.forward(gpu, x, Io::Bf16, Io::F32, rows, 1))?;
        let (mut ids, mut wts) = (gpu.pool().take(rows * topk * 4)?, gpu.pool().take(rows * topk * 4)?);
        ops::route(
            gpu,
            &logits.view(),
            &m.bias.view(),
            &mut ids.view_mut(),
            &mut wts.view_mut(),
            (rows, experts, topk),
            m.norm_topk,
            m.route_scale,
        )?;
        if let Some(log) = super::model::unlocked(&self.route_log).as_mut() {
            log.push(gpu.download::<i32>(&ids)?);
        }
        let xq = normed.acts();
        let pairs = rows * topk;
        // The CPU's rule (Moe::forward): a call of at least min_rows rows runs the MXFP4 copies when they exist.
        let [w1, w2, w3] = match &m.prefill {
            Some((copies, min_rows)) if rows >= *min_rows => [&copies[0], &copies[1], &copies[2]],
            _ => [&m.w1, &m.w2, &m.w3],
        };
        if let (Some(s), Some(_), Some(_), None) = (w1.shared_row(), w2.shared_row(), w3.shared_row(), &m.ep) {
            return self.moe_joined(m, (&ids, &wts), &xq, s);
        }
        let down = self.phase("moe: routed experts", || {
            if let Some(ep) = &m.ep {
                return self.routed_ep(m, ep, x, (&ids, &wts), rows);
            }
            let groups = w1.group(gpu, &ids, pairs, (self.opts.group_experts, self.opts.tiled_experts))?;
            let by = (&ids, groups.as_ref());
            let g = w1.routed(gpu, by, &xq, topk, true, pairs)?;
            let u = w3.routed(gpu, by, &xq, topk, true, pairs)?;
            let mut h = gpu.pool().take(pairs * inter * 2)?;
            ops::swiglu(gpu, &g.view(), &u.view(), Some(&wts.view()), &mut h.view_mut(), (pairs, inter), m.limit)?;
            w2.routed(gpu, by, &Acts::new(&h, pairs, inter), topk, false, pairs)
        })?;
        let [s1, s2, s3] = &m.shared;
        let (sg, su) = (s1.forward_f32(gpu, &xq)?, s3.forward_f32(gpu, &xq)?);
        let sinter = s1.n;
        let mut sh = gpu.pool().take(rows * sinter * 2)?;
        ops::swiglu(gpu, &sg.view(), &su.view(), None, &mut sh.view_mut(), (rows, sinter), m.limit)?;
        let sd = s2.forward_f32(gpu, &Acts::new(&sh, rows, sinter))?;
        let mut y = gpu.pool().take(rows * dim * 2)?;
        ops::moe_combine(gpu, &down.view(), &ids.view(), &sd.view(), &mut y.view_mut(), (rows, topk, dim))?;
        Ok(y)
    }

    /// The routed launches carrying the shared expert as each row's last pair (table row `shared`): w1+w3, SwiGLU, w2, combine.
    fn moe_joined(&self, m: &GMoe, (ids, wts): (&Buf, &Buf), xq: &Acts<'_>, shared: usize) -> Result<Buf, Error> {
        let (gpu, cfg) = (self.gpu, self.cfg());
        let (dim, inter, topk, rows) = (cfg.dim, cfg.moe_inter_dim, m.topk, xq.rows);
        let (k1, pairs) = (topk + 1, xq.rows * (topk + 1));
        let (mut ids2, mut wts2) = (gpu.pool().take(pairs * 4)?, gpu.pool().take(pairs * 4)?);
        let dims = (rows, topk, shared);
        ops::moe_with_shared(gpu, (&ids.view(), &wts.view()), (&mut ids2.view_mut(), &mut wts2.view_mut()), dims)?;
        let down = self.phase("moe: routed experts", || {
            let g = m.w1.routed(gpu, (&ids2, None), xq, k1, true, pairs)?;
            let u = m.w3.routed(gpu, (&ids2, None), xq, k1, true, pairs)?;
            let mut h = gpu.pool().take(pairs * inter * 2)?;
            ops::swiglu(gpu, &g.view(), &u.view(), Some(&wts2.view()), &mut h.view_mut(), (pairs, inter), m.limit)?;
            m.w2.routed(gpu, (&ids2, None), &Acts::new(&h, pairs, inter), k1, false, pairs)
        })?;
        let mut y = gpu.pool().take(rows * dim * 2)?;
        ops::moe_combine_joined(gpu, &down.view(), &ids.view(), &mut y.view_mut(), (rows, topk, dim))?;
        Ok(y)
    }
}
