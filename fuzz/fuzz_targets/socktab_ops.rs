//! Operation sequences on udp-socktab (socket, bind, connect, disconnect, close, device and
//! CPU changes, lookups) against `udp_socktab::reference`, through the differential model of
//! the crate's proptest (`crates/udp-socktab/tests/world/mod.rs`, included here): after every
//! call the writer and the reference agree on its result and on every socket's state and
//! group, lookups agree on the receiving socket, and at the end of one input in sixteen (by its
//! first byte) every lookup the pools can form agrees (2,322 lookups, each against the
//! reference cut down to the key's namespace and port, `Reference::for_port`: done after
//! every input with scans of the whole reference, they held the target at 41 executions per
//! second; in one input of four, they still took 41% of its time, perf 2026-11-28).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/udp-socktab/tests/world/mod.rs"]
mod world;

use world::{Op, World};

/// Eight bytes per operation: the kind, then its arguments (each taken modulo its pool).
fn op(b: &[u8; 8]) -> Op {
    let sock = usize::from(b[1] % 24);
    match b[0] % 16 {
        0..=2 => Op::Socket {
            ns: u32::from(b[1] % 3),
            family: b[2] % 3,
            reuseaddr: b[3] & 1 == 1,
            reuseport: b[3] & 2 == 2,
            dev: u32::from(b[4] % 3),
            uid: u32::from(b[5] & 1),
        },
        3..=7 => Op::Bind {
            sock,
            v6: b[2] & 15 == 0,
            addr: usize::from(b[3] % 7),
            port: usize::from(b[4] % 4),
        },
        8 | 9 => Op::Connect {
            sock,
            v6: b[2] & 7 == 0,
            peer: usize::from(b[3] % 4),
            port: [7000, 7001, 0][usize::from(b[4] % 3)],
            src: usize::from(b[5] % 7),
        },
        10 => Op::Disconnect { sock },
        11 => Op::Close { sock },
        12 => Op::SetDev {
            sock,
            dev: u32::from(b[2] % 3),
        },
        13 => Op::SetCpu {
            sock,
            cpu: (b[2] & 4 == 0).then_some(u32::from(b[2] & 1)),
        },
        _ => Op::Lookup {
            ns: u32::from(b[1] % 3),
            v6: b[2] & 1 == 1,
            src: usize::from(b[3] % 4),
            sport: [7000, 7001, 9][usize::from(b[4] % 3)],
            dst: usize::from(b[5] % 7),
            dport: 1 + usize::from(b[6] % 3),
            dif: u32::from(b[7] % 3),
            hash: u32::from_le_bytes([b[2], b[3], b[6], b[7]]),
            cpu: u32::from(b[7] >> 7),
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((seed, ops)) = data.split_first_chunk::<8>() else {
        return;
    };
    let mut world = World::new(u64::from_le_bytes(*seed));
    let mut n = 0;
    for chunk in ops.chunks_exact(8) {
        let op = op(chunk.try_into().expect("eight bytes"));
        if let Err(e) = world.apply(&op) {
            panic!("{op:?}: {e}");
        }
        n += 1;
        if n == 200 {
            // Longer inputs add nothing the model's pools can show.
            break;
        }
    }
    if seed[0] & 15 == 0 {
        if let Err(e) = world.sweep() {
            panic!("sweep: {e}");
        }
    }
});
