//! Lockstep (issue 25): rank 0 runs the lane host and broadcasts each call as a frame; every rank runs it and reports.

use super::SharedComm;
use crate::{Error, Model};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use tf_family::Family;

/// One call every rank runs on its copy of a lane.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Frame {
    NewLane {
        id: u64,
    },
    Fork {
        src: u64,
        dst: u64,
    },
    /// A prompt chunk; with `pf`, its Engram rows come from that read-ahead on every rank that holds it.
    Prefill {
        id: u64,
        tokens: Vec<u32>,
        last: bool,
        pf: Option<u64>,
    },
    /// Starts each rank's read-ahead of its own Engram rows for a prompt's chunks (after `lane`'s history, or a fresh one).
    Prefetch {
        pf: u64,
        lane: Option<u64>,
        prompt: Vec<u32>,
        chunks: Vec<usize>,
    },
    Decode {
        id: u64,
        tokens: Vec<u32>,
    },
    Verify {
        id: u64,
        tokens: Vec<u32>,
    },
    Rewind {
        id: u64,
        keep: usize,
    },
    Draft {
        id: u64,
        next: u32,
    },
    /// Several lanes in one step: lane `ids[i]` runs `rows[i]`, as a verify window where `verify[i]`.
    Step {
        ids: Vec<u64>,
        rows: Vec<Vec<u32>>,
        verify: Vec<bool>,
    },
    Stop,
}

/// A frame and the lanes and read-aheads dropped since the last one.
#[derive(Debug, Serialize, Deserialize)]
struct Msg {
    free: Vec<u64>,
    free_pf: Vec<u64>,
    frame: Frame,
}

/// One rank's lanes and prompt read-aheads, by the leader's ids.
struct Held<F: Rank> {
    lanes: HashMap<u64, F::Lane>,
    pfs: HashMap<u64, F::Prefetch>,
}

impl<F: Rank> Default for Held<F> {
    fn default() -> Self {
        Held { lanes: HashMap::new(), pfs: HashMap::new() }
    }
}

impl<F: Rank> Held<F> {
    fn free(&mut self, msg: &Msg) {
        msg.free.iter().for_each(|id| drop(self.lanes.remove(id)));
        msg.free_pf.iter().for_each(|id| drop(self.pfs.remove(id)));
    }
}

type Rows = Option<Vec<Vec<f32>>>;

/// One rank's model: any backend's dsv41 family (the CPU model, a GPU model).
pub trait Rank: Family<Error = Error> {}
impl<F: Family<Error = Error>> Rank for F {}

/// Runs `frame` on one rank's lanes; the logits of prefill, decode and verify. A refused step keeps its lane as the step left it.
fn apply<F: Rank>(model: &F, held: &mut Held<F>, frame: &Frame) -> Result<Rows, String> {
    let missing = |id: u64| format!("lockstep: no lane {id} on this rank");
    let (lanes, pfs) = (&mut held.lanes, &mut held.pfs);
    let (id, st) = match frame {
        Frame::NewLane { id } => (*id, model.new_lane().map_err(|e| e.to_string())?),
        Frame::Fork { src, dst } => {
            (*dst, model.fork(lanes.get(src).ok_or_else(|| missing(*src))?).map_err(|e| e.to_string())?)
        }
        Frame::Stop | Frame::Step { .. } => return Ok(None),
        Frame::Prefetch { pf, lane, prompt, chunks } => {
            let lane = lane.map(|id| lanes.get(&id).ok_or_else(|| missing(id))).transpose()?;
            // A rank that fetches nothing answers no rows; its prefills then read their rows as they go.
            return Ok(match model.prefetch(lane, prompt, chunks).map_err(|e| e.to_string())? {
                Some(p) => {
                    pfs.insert(*pf, p);
                    Some(Vec::new())
                }
                None => None,
            });
        }
        Frame::Prefill { id, .. }
        | Frame::Decode { id, .. }
        | Frame::Verify { id, .. }
        | Frame::Rewind { id, .. }
        | Frame::Draft { id, .. } => {
            let st = lanes.get_mut(id).ok_or_else(|| missing(*id))?;
            let out = match frame {
                Frame::Prefill { tokens, last, pf, .. } => match pf.and_then(|pf| pfs.get_mut(&pf)) {
                    Some(p) => model.prefill_prefetched(st, tokens, *last, p),
                    None => model.prefill(st, tokens, *last),
                }
                .map(|l| l.map(|l| vec![l])),
                Frame::Decode { tokens, .. } => model.decode(st, tokens).map(Some),
                Frame::Verify { tokens, .. } => model.verify(st, tokens).map(Some),
                Frame::Rewind { keep, .. } => model.rewind(st, *keep).map(|()| None),
                // Drafts travel as two rows: the tokens (exact in f32) and their confidences.
                Frame::Draft { next, .. } => model
                    .draft(st, *next, usize::MAX)
                    .map(|d| d.map(|d| vec![d.tokens.iter().map(|&t| t as f32).collect(), d.confidence])),
                _ => unreachable!("matched above"),
            };
            return out.map_err(|e| e.to_string());
        }
    };
    lanes.insert(id, st);
    Ok(None)
}

/// A step frame on this rank's lanes: each lane's rows or its own error.
fn apply_step<F: Rank>(
    model: &F,
    held: &mut Held<F>,
    (ids, rows, verify): (&[u64], &[Vec<u32>], &[bool]),
) -> Vec<Result<Rows, String>> {
    let lanes = &mut held.lanes;
    let mut taken: Vec<(u64, F::Lane)> = ids.iter().filter_map(|id| lanes.remove_entry(id)).collect();
    if taken.len() != ids.len() || rows.len() != ids.len() || verify.len() != ids.len() {
        lanes.extend(taken);
        return ids
            .iter()
            .map(|id| Err(format!("lockstep: a step frame names lane {id} twice or a lane not on this rank")))
            .collect();
    }
    let mut refs: Vec<&mut F::Lane> = taken.iter_mut().map(|(_, l)| l).collect();
    let rows: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
    let mut pfs: Vec<Option<F::Prefetch>> = ids.iter().map(|_| None).collect();
    let out = model.step_lanes(&mut refs, &rows, verify, &mut pfs);
    lanes.extend(taken);
    out.into_iter().map(|r| r.map(Some).map_err(|e| e.to_string())).collect()
}

/// `apply` (one result per lane of the frame), with a panic (a failed collective inside the forward) turned into this rank's refusal.
fn run<F: Rank>(model: &F, held: &mut Held<F>, frame: &Frame) -> Vec<Result<Rows, String>> {
    let n = if let Frame::Step { ids, .. } = frame { ids.len() } else { 1 };
    let out = catch_unwind(AssertUnwindSafe(|| match frame {
        Frame::Step { ids, rows, verify } => apply_step(model, held, (ids, rows, verify)),
        _ => vec![apply(model, held, frame)],
    }));
    out.unwrap_or_else(|p| {
        let why = p.downcast_ref::<String>().cloned().unwrap_or_else(|| "a rank panicked".into());
        vec![Err(why); n]
    })
}

/// Every rank's verdict on each lane of the frame just run, rank by rank.
fn verdicts(comm: &SharedComm, oks: &[bool]) -> Result<Vec<Vec<bool>>, String> {
    let (world, n) = (comm.world_size(), oks.len());
    let mine: Vec<f32> = oks.iter().map(|&ok| f32::from(u8::from(ok))).collect();
    let mut all = vec![0.0f32; world * n];
    comm.with(|c| c.all_gather(&mine, &mut all)).map_err(|e| e.to_string())?;
    Ok(all.chunks(n.max(1)).map(|r| r.iter().map(|&v| v == 1.0).collect()).collect())
}

/// A follower rank: runs the leader's frames until `Stop`; an error means the group is lost (the caller exits 70).
pub fn follow<F: Rank>(model: &F, comm: &SharedComm) -> Result<(), String> {
    let mut held = Held::<F>::default();
    loop {
        let mut bytes = Vec::new();
        comm.with(|c| c.broadcast_bytes_idle(&mut bytes, 0)).map_err(|e| format!("waiting for the leader: {e}"))?;
        let msg: Msg = serde_json::from_slice(&bytes).map_err(|e| format!("a frame that does not parse: {e}"))?;
        held.free(&msg);
        if matches!(msg.frame, Frame::Stop) {
            return Ok(());
        }
        let oks: Vec<bool> = run(model, &mut held, &msg.frame).iter().map(Result::is_ok).collect();
        verdicts(comm, &oks)?;
    }
}

/// Rank 0 of a tensor-parallel group as one model family: each call runs on every rank in lockstep.
pub struct Leader<F: Rank = Model> {
    pub model: F,
    comm: SharedComm,
    held: Mutex<Held<F>>,
    next_id: Mutex<u64>,
    freed: Arc<Mutex<Vec<u64>>>,
    freed_pf: Arc<Mutex<Vec<u64>>>,
    lost: Mutex<Option<String>>,
    /// Exit the process with code 70 when lockstep is lost (the server; tests look at the error instead).
    pub exit_on_lost: bool,
}

/// A lane of the leader: its id on every rank; dropping it frees the followers' copies with the next frame.
pub struct TpLane {
    pub id: u64,
    freed: Arc<Mutex<Vec<u64>>>,
}

impl Drop for TpLane {
    fn drop(&mut self) {
        self.freed.lock().push(self.id);
    }
}

/// A prompt read-ahead running on every rank (each reading its own Engram rows); dropping it frees them with the next frame.
pub struct TpPrefetch {
    pub id: u64,
    freed: Arc<Mutex<Vec<u64>>>,
}

impl Drop for TpPrefetch {
    fn drop(&mut self) {
        self.freed.lock().push(self.id);
    }
}

impl<F: Rank> Leader<F> {
    pub fn new(model: F, comm: SharedComm) -> Leader<F> {
        Leader {
            model,
            comm,
            held: Mutex::new(Held::default()),
            next_id: Mutex::new(0),
            freed: Arc::default(),
            freed_pf: Arc::default(),
            lost: Mutex::new(None),
            exit_on_lost: false,
        }
    }

    fn lose(&self, why: String) -> Error {
        tracing::error!(reason = %why, "lockstep_lost");
        if self.exit_on_lost {
            std::process::exit(70);
        }
        *self.lost.lock() = Some(why.clone());
        Error::LockstepLost(why)
    }

    /// [`Leader::call_lanes`] of a one-lane frame.
    fn call(&self, frame: Frame) -> Result<Rows, Error> {
        self.call_lanes(frame)?.remove(0)
    }

    /// Broadcasts `frame`, runs it here, and collects every rank's verdict per lane: all ok, all refused (that request fails), or lost.
    fn call_lanes(&self, frame: Frame) -> Result<Vec<Result<Rows, Error>>, Error> {
        if let Some(why) = self.lost.lock().clone() {
            return Err(Error::LockstepLost(why));
        }
        let free: Vec<u64> = std::mem::take(&mut *self.freed.lock());
        let free_pf: Vec<u64> = std::mem::take(&mut *self.freed_pf.lock());
        let msg = Msg { free, free_pf, frame };
        let mut held = self.held.lock();
        held.free(&msg);
        let mut bytes = serde_json::to_vec(&msg).expect("frames serialize");
        if let Err(e) = self.comm.with(|c| c.broadcast_bytes(&mut bytes, 0)) {
            return Err(self.lose(format!("sending a frame: {e}")));
        }
        let local = run(&self.model, &mut held, &msg.frame);
        let oks: Vec<bool> = local.iter().map(Result::is_ok).collect();
        let all = verdicts(&self.comm, &oks).map_err(|e| self.lose(format!("collecting verdicts: {e}")))?;
        if all.iter().any(|rank| *rank != oks) {
            return Err(self.lose(format!("ranks disagree on a frame: {all:?}")));
        }
        Ok(local.into_iter().map(|r| r.map_err(Error::Refused)).collect())
    }

    pub(crate) fn new_lane(&self) -> Result<TpLane, Error> {
        let id = self.new_id();
        self.call(Frame::NewLane { id })?;
        Ok(TpLane { id, freed: self.freed.clone() })
    }

    pub(crate) fn fork(&self, src: &TpLane) -> Result<TpLane, Error> {
        let dst = self.new_id();
        self.call(Frame::Fork { src: src.id, dst })?;
        Ok(TpLane { id: dst, freed: self.freed.clone() })
    }

    fn new_id(&self) -> u64 {
        let mut n = self.next_id.lock();
        *n += 1;
        *n
    }

    pub(crate) fn prefill(&self, lane: &TpLane, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, Error> {
        self.prefill_with(lane, tokens, last, None)
    }

    /// A prompt chunk whose Engram rows every rank reads from the read-ahead `pf` (its own rows only).
    pub(crate) fn prefill_with(
        &self,
        lane: &TpLane,
        tokens: &[u32],
        last: bool,
        pf: Option<&TpPrefetch>,
    ) -> Result<Option<Vec<f32>>, Error> {
        let rows = self.call(Frame::Prefill { id: lane.id, tokens: tokens.to_vec(), last, pf: pf.map(|p| p.id) })?;
        Ok(rows.and_then(|mut r| r.pop()))
    }

    /// Starts every rank's read-ahead of a prompt's chunks; `None` where the ranks fetch nothing (Engram mapped, or none).
    pub(crate) fn prefetch(
        &self,
        lane: Option<&TpLane>,
        prompt: &[u32],
        chunks: &[usize],
    ) -> Result<Option<TpPrefetch>, Error> {
        let pf = self.new_id();
        let frame = Frame::Prefetch { pf, lane: lane.map(|l| l.id), prompt: prompt.to_vec(), chunks: chunks.to_vec() };
        let handle = TpPrefetch { id: pf, freed: self.freed_pf.clone() };
        // Dropped at once when the leader fetches nothing, so a follower that did frees its read-ahead too.
        Ok(self.call(frame)?.map(|_| handle))
    }

    pub(crate) fn decode(&self, lane: &TpLane, tokens: &[u32], verify: bool) -> Result<Vec<Vec<f32>>, Error> {
        let (id, tokens) = (lane.id, tokens.to_vec());
        let frame = if verify { Frame::Verify { id, tokens } } else { Frame::Decode { id, tokens } };
        Ok(self.call(frame)?.unwrap_or_default())
    }

    /// Every lane's rows in one frame (a verify window where `verify[i]`): the ranks run them as one step.
    pub(crate) fn step_lanes(
        &self,
        lanes: &[&mut TpLane],
        rows: &[&[u32]],
        verify: &[bool],
    ) -> Vec<Result<Vec<Vec<f32>>, Error>> {
        let ids: Vec<u64> = lanes.iter().map(|l| l.id).collect();
        let frame = Frame::Step { ids, rows: rows.iter().map(|r| r.to_vec()).collect(), verify: verify.to_vec() };
        match self.call_lanes(frame) {
            Ok(out) => out.into_iter().map(|r| r.map(Option::unwrap_or_default)).collect(),
            Err(e) => {
                let msg = e.to_string();
                std::iter::once(Err(e)).chain((1..lanes.len()).map(|_| Err(Error::LockstepLost(msg.clone())))).collect()
            }
        }
    }

    pub(crate) fn rewind(&self, lane: &TpLane, keep: usize) -> Result<(), Error> {
        self.call(Frame::Rewind { id: lane.id, keep }).map(drop)
    }

    /// Drafts on every rank: the head and Markov head may be split by vocabulary, and the DSpark stages read rings every rank fills alike.
    pub(crate) fn draft(&self, lane: &TpLane, next: u32) -> Result<Option<tf_family::Draft>, Error> {
        let Some(rows) = self.call(Frame::Draft { id: lane.id, next })? else { return Ok(None) };
        let [tokens, confidence]: [Vec<f32>; 2] =
            rows.try_into().map_err(|_| Error::Refused("lockstep: a draft frame returned no drafts".into()))?;
        Ok(Some(tf_family::Draft { tokens: tokens.iter().map(|&t| t as u32).collect(), confidence }))
    }
}

impl<F: Rank> Drop for Leader<F> {
    fn drop(&mut self) {
        if self.lost.lock().is_none() {
            let mut bytes = serde_json::to_vec(&Msg { free: Vec::new(), free_pf: Vec::new(), frame: Frame::Stop })
                .expect("frames serialize");
            let _ = self.comm.with(|c| c.broadcast_bytes(&mut bytes, 0));
        }
    }
}
