#![doc = include_str!("../README.md")]

mod error;
mod in_process;
pub mod nccl;
mod op;
pub mod profile;
mod tcp;

pub use error::CommError;
pub use in_process::InProcessComm;
pub use nccl::NcclComm;
pub use profile::Profiled;
pub use tcp::{TcpComm, spare_loopback_port};

/// One rank's handle on a group; every rank must issue the same collectives in the same order.
pub trait Comm: Send {
    /// This rank's index, `0..world_size()`.
    fn rank(&self) -> usize;

    fn world_size(&self) -> usize;

    /// Element-wise sum folded in rank order `((x0 + x1) + x2) + ...`, so the bits match on every rank and run.
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<(), CommError>;

    /// Concatenates every rank's `input` in rank order; `output.len()` must be `world_size * input.len()`.
    fn all_gather(&self, input: &[f32], output: &mut [f32]) -> Result<(), CommError>;

    /// Rank `r` gets slice `r` of the rank-order sum, bit-identical to the same slice of `all_reduce_sum`.
    fn reduce_scatter_sum(&self, input: &[f32], output: &mut [f32]) -> Result<(), CommError>;

    /// Copies `root`'s buffer into every rank's; all ranks pass the same length.
    fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<(), CommError>;

    /// Replaces followers' bytes with `root`'s, of any length: how the leader tells followers the next step.
    fn broadcast_bytes(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError>;

    /// [`Comm::broadcast_bytes`] where followers wait without a deadline: a follower idles until the leader's next step.
    fn broadcast_bytes_idle(&self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        self.broadcast_bytes(buf, root)
    }

    fn barrier(&self) -> Result<(), CommError>;

    /// Sends `buf` to rank `to`; messages between two ranks arrive in the order sent; may wait for `to` to receive (NCCL does).
    fn send(&self, buf: &[f32], to: usize) -> Result<(), CommError>;

    /// Receives the next message from rank `from` into `buf`; one of another length is consumed and is a `LengthMismatch`.
    fn recv(&self, buf: &mut [f32], from: usize) -> Result<(), CommError>;

    /// Sends to `to` while receiving from `from`: the step of a ring shift, which two blocking sends could deadlock.
    fn send_recv(&self, send: &[f32], to: usize, recv: &mut [f32], from: usize) -> Result<(), CommError>;

    /// Rank 0 leads lockstep: it decides each step and broadcasts it to the followers.
    fn is_leader(&self) -> bool {
        self.rank() == 0
    }
}
