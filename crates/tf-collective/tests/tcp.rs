//! `TcpComm` between processes on loopback: the ring gives in-process's results bit for bit; a killed or hung peer errors, never hangs.

use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tf_collective::{Comm, CommError, TcpComm};

#[path = "common/p2p.rs"]
mod p2p;

/// Rank r's values: their rank-order sum is not their sum in any other order.
fn values(r: usize) -> Vec<f32> {
    [vec![1.0e8, 3.0, -7.5], vec![1.0, 0.25, 7.5], vec![-1.0e8, 1.0e-3, 1.0e7]][r % 3].clone()
}

/// Every collective on one rank of a 3-rank group, asserting what the in-process group gives.
fn scenario(c: &TcpComm) {
    let (r, w) = (c.rank(), c.world_size());
    let mut all = vec![0.0; 3 * w];
    c.all_gather(&values(r), &mut all).unwrap();
    assert_eq!(all, (0..w).flat_map(values).collect::<Vec<_>>());
    let mut sum = values(r);
    c.all_reduce_sum(&mut sum).unwrap();
    let want: Vec<f32> = (0..3).map(|i| (0..w).map(|q| values(q)[i]).reduce(|a, b| a + b).unwrap()).collect();
    assert_eq!(sum, want, "the sum folds in rank order");
    let mut msg = if r == 0 { b"step 1: decode lane 7".to_vec() } else { Vec::new() };
    c.broadcast_bytes(&mut msg, 0).unwrap();
    assert_eq!(msg, b"step 1: decode lane 7");
    let mut f = if r == 1 { vec![4.0, 5.0] } else { vec![0.0; 2] };
    c.broadcast(&mut f, 1).unwrap();
    assert_eq!(f, [4.0, 5.0]);
    let e = if r == 0 { c.barrier() } else { c.all_gather(&[1.0], &mut vec![0.0; w]) };
    assert!(matches!(e, Err(CommError::OpMismatch { .. })), "rank {r}: {e:?}");
    c.barrier().expect("a mismatch leaves the group usable");
    p2p::scenario(c);
}

fn child(scenario_name: &str, rank: usize, world: usize, addr: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_process_entry", "--nocapture"])
        .env("TF_TCP_CHILD", scenario_name)
        .env("TF_TCP_RANK", rank.to_string())
        .env("TF_TCP_WORLD", world.to_string())
        .env("TF_TCP_ADDR", addr)
        .spawn()
        .unwrap()
}

fn free_addr() -> String {
    format!("127.0.0.1:{}", tf_collective::spare_loopback_port().unwrap())
}

/// Where the parent's child processes start (the parent runs it too, and it returns at once there).
#[test]
fn child_process_entry() {
    let Ok(which) = std::env::var("TF_TCP_CHILD") else { return };
    let num = |k: &str| std::env::var(k).unwrap().parse::<usize>().unwrap();
    let c =
        TcpComm::join(num("TF_TCP_RANK"), num("TF_TCP_WORLD"), std::env::var("TF_TCP_ADDR").unwrap(), None).unwrap();
    match which.as_str() {
        "all" => scenario(&c),
        "die" => c.barrier().unwrap(),
        "send-die" => c.send(&[5.0, 6.0], 0).unwrap(),
        "hang" => {
            c.barrier().unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
fn three_processes_run_every_collective_as_one_process_does() {
    let addr = free_addr();
    let kids: Vec<Child> = (1..3).map(|r| child("all", r, 3, &addr)).collect();
    let c = TcpComm::join(0, 3, addr.as_str(), Some(Duration::from_secs(30))).unwrap();
    scenario(&c);
    for mut k in kids {
        assert!(k.wait().unwrap().success(), "a child rank failed its own checks");
    }
}

#[test]
fn a_killed_peer_fails_the_next_collective_at_once_and_a_hung_one_at_the_deadline() {
    for which in ["die", "hang"] {
        let addr = free_addr();
        let mut kid = child(which, 1, 2, &addr);
        let c = TcpComm::join(0, 2, addr.as_str(), Some(Duration::from_millis(700))).unwrap();
        c.barrier().unwrap();
        if which == "die" {
            kid.wait().unwrap();
        }
        let t = Instant::now();
        let e = c.all_gather(&[1.0], &mut [0.0; 2]);
        let took = t.elapsed();
        let _ = kid.kill();
        kid.wait().unwrap();
        let want = if which == "die" { "PeerGone" } else { "Timeout" };
        assert!(format!("{e:?}").contains(want), "{which}: {e:?}");
        assert!(took < Duration::from_secs(3), "{which}: took {took:?}");
        assert!(c.barrier().is_err(), "{which}: the group stays broken");
    }
}

#[test]
fn a_message_from_a_peer_that_then_died_arrives_and_a_silent_peer_times_out() {
    for which in ["send-die", "hang"] {
        let addr = free_addr();
        let mut kid = child(which, 1, 2, &addr);
        let c = TcpComm::join(0, 2, addr.as_str(), Some(Duration::from_millis(700))).unwrap();
        let mut b = [0.0; 2];
        if which == "send-die" {
            kid.wait().unwrap();
            c.recv(&mut b, 1).unwrap();
            assert_eq!(b, [5.0, 6.0]);
        } else {
            c.barrier().unwrap();
        }
        let t = Instant::now();
        let e = c.recv(&mut b, 1);
        let took = t.elapsed();
        let _ = kid.kill();
        kid.wait().unwrap();
        let want = if which == "send-die" { "PeerGone { rank: 1 }" } else { "Timeout" };
        assert!(format!("{e:?}").contains(want), "{which}: {e:?}");
        assert!(took < Duration::from_secs(3), "{which}: took {took:?}");
        assert!(c.send(&[1.0], 1).is_err(), "{which}: the group stays broken");
    }
}

#[test]
fn a_group_of_one_needs_no_sockets() {
    let c = TcpComm::join(0, 1, "127.0.0.1:9", None).unwrap();
    let mut v = vec![2.5];
    c.all_reduce_sum(&mut v).unwrap();
    assert_eq!(v, [2.5]);
    p2p::scenario(&c);
}
