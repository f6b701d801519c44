//! Verify-window undo on the CPU (issue 26): what a window's rows overwrite, put back for the rows it rejects.

use super::Model;
use crate::plan::Armed;
use crate::state::{SeqState, Undo};
use tf_core::Error;

impl Model {
    /// Saves the ring slots, open groups and cache lengths that `armed`'s rows will overwrite; `None` forgets.
    pub(crate) fn arm_undo(&self, st: &mut SeqState, armed: Option<Armed>) {
        for c in st.compressed.iter_mut().flatten() {
            c.recent = None;
        }
        let Some(armed) = armed else {
            st.undo = None;
            return;
        };
        let positions = armed.pos0..armed.pos0 + armed.tokens.len();
        let slots = st.windows.iter().map(|w| positions.clone().map(|p| w.saved(p)).collect()).collect();
        let caches = st
            .compressed
            .iter_mut()
            .map(|c| {
                c.as_mut().map(|c| {
                    c.recent = Some(Vec::new());
                    (c.open.clone(), c.latents.len(), c.index_k.len())
                })
            })
            .collect();
        st.undo = Some(Undo { armed, slots, caches });
    }

    /// Puts back what the armed window's rows from `keep` on overwrote: ring slots, latents, index keys, open groups.
    pub(crate) fn rewind_undo(&self, st: &mut SeqState, keep: usize) -> Result<Armed, Error> {
        let undo = st.undo.take().ok_or_else(|| Error::Invalid("rewind without a verify window".into()))?;
        let (pos0, rows) = (undo.armed.pos0, undo.armed.tokens.len());
        if keep > rows {
            return Err(Error::Invalid(format!("rewind keeps {keep} of a {rows}-row window")));
        }
        let end = pos0 + keep;
        for (ring, saved) in st.windows.iter_mut().zip(undo.slots) {
            for (p, slot) in (pos0..pos0 + rows).zip(saved).skip(keep) {
                ring.restore(p, slot);
            }
        }
        for (layer, (cache, saved)) in st.compressed.iter_mut().zip(undo.caches).enumerate() {
            let (Some(c), Some((open, latents, index_k))) = (cache.as_mut(), saved) else { continue };
            let ratio = self.cfg.compress_ratios[layer].max(1);
            let groups = end / ratio - pos0 / ratio;
            c.latents.truncate(latents + groups);
            c.index_k.truncate(index_k + groups);
            let recent = c.recent.take().unwrap_or_default();
            if ratio > 1 {
                // The open group at `end` holds its rows from `ratio * (end / ratio)`; `open` then `recent` start at `ratio * (pos0 / ratio)`.
                let base = ratio * (pos0 / ratio);
                let from = ratio * (end / ratio) - base;
                c.open = open.into_iter().chain(recent).skip(from).take(end - base - from).collect();
            }
        }
        Ok(undo.armed)
    }
}
