//! A scripted family for lane-host tests: logits favour `(last + 1) % 16`, decoding 11 is slow, 13 fails, 14 panics.

use std::sync::{Arc, Mutex, PoisonError};
use tf_server::lanes::Family;

/// Steps logged as ('p' or 'd', the lane's first token).
pub type Log = Arc<Mutex<Vec<(char, u32)>>>;

/// Holding `gate` holds every model step; `log` records them in order; with `prefetch`, admission logs ('f', chunk count) and each fed chunk ('F', its length).
#[derive(Clone, Default)]
pub struct Scripted {
    pub gate: Arc<Mutex<()>>,
    pub log: Log,
    pub prefetch: bool,
}

/// The scripted family's failure: the message the lane host must pass on to the request.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Family for Scripted {
    type Lane = Vec<u32>;
    type Error = Refused;
    fn new_lane(&self) -> Result<Vec<u32>, Refused> {
        Ok(Vec::new())
    }
    fn fork(&self, lane: &Vec<u32>) -> Result<Vec<u32>, Refused> {
        Ok(lane.clone())
    }
    fn vocab_size(&self) -> usize {
        16
    }
    fn eos_token(&self) -> u32 {
        15
    }
    fn max_context(&self) -> usize {
        64
    }
    fn prefill(&self, lane: &mut Vec<u32>, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, Refused> {
        let _held = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        lane.extend_from_slice(tokens);
        self.log.lock().unwrap().push(('p', lane[0]));
        Ok(last.then(|| next_logits(lane)))
    }
    fn decode(&self, lane: &mut Vec<u32>, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Refused> {
        let _held = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        self.log.lock().unwrap().push(('d', lane[0]));
        match tokens[0] {
            11 => std::thread::sleep(std::time::Duration::from_millis(100)),
            13 => return Err(Refused("token 13 is refused".into())),
            14 => panic!("token 14 breaks the model"),
            _ => {}
        }
        lane.extend_from_slice(tokens);
        Ok(vec![next_logits(lane)])
    }

    type Prefetch = Vec<usize>;

    fn prefetch(
        &self,
        _lane: Option<&Vec<u32>>,
        prompt: &[u32],
        chunks: &[usize],
    ) -> Result<Option<Vec<usize>>, Refused> {
        if !self.prefetch {
            self.log.lock().unwrap().push(('n', 0));
            return Ok(None);
        }
        assert_eq!(chunks.iter().sum::<usize>(), prompt.len(), "the chunks cut the prompt");
        self.log.lock().unwrap().push(('f', chunks.len() as u32));
        Ok(Some(chunks.to_vec()))
    }

    fn prefill_prefetched(
        &self,
        lane: &mut Vec<u32>,
        tokens: &[u32],
        last: bool,
        pf: &mut Vec<usize>,
    ) -> Result<Option<Vec<f32>>, Refused> {
        if pf.first() != Some(&tokens.len()) {
            return Err(Refused(format!("fetched ahead for {:?}, fed {}", pf.first(), tokens.len())));
        }
        pf.remove(0);
        // Token 12 in a chunk stands for a disk read that failed under it (a short read, an I/O error).
        if tokens.contains(&12) {
            return Err(Refused("engram table `layers.1.engram.embed`: short read at byte 4096".into()));
        }
        self.log.lock().unwrap().push(('F', tokens.len() as u32));
        self.prefill(lane, tokens, last)
    }

    fn prefetch_decode(&self, _lane: &Vec<u32>, tokens: &[u32]) -> Option<Vec<usize>> {
        self.prefetch.then(|| {
            self.log.lock().unwrap().push(('g', tokens[0]));
            vec![tokens[0] as usize]
        })
    }

    fn decode_prefetched(
        &self,
        lane: &mut Vec<u32>,
        tokens: &[u32],
        pf: &mut Vec<usize>,
    ) -> Result<Vec<Vec<f32>>, Refused> {
        if pf[..] != [tokens[0] as usize] {
            return Err(Refused(format!("fetched ahead for {pf:?}, decoding {tokens:?}")));
        }
        self.log.lock().unwrap().push(('G', tokens[0]));
        self.decode(lane, tokens)
    }
}

fn next_logits(lane: &[u32]) -> Vec<f32> {
    let mut l = vec![0.0; 16];
    l[((lane[lane.len() - 1] + 1) % 16) as usize] = 5.0;
    l
}
