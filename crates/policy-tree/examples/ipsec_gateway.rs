//! How a dataplane embeds `policy-tree`: the IPsec forward check (`__xfrm_policy_check`,
//! direction fwd) on each forwarded packet, under the batch's epoch pin, while the control plane
//! adds and deletes policies as `ip xfrm policy` (or an IKE daemon) does.
//!
//! A site-to-site gateway: 200 tunnels between branch /24s, a plain-text exception for the
//! monitoring host at a better priority, and a blocked range. Between batches a tunnel comes
//! and goes. Every decision is compared with [`LinearDb`], the crate's linear-scan reference;
//! any difference fails the example.
//!
//! ```sh
//! cargo run -p policy-tree --example ipsec_gateway
//! ```

use std::net::Ipv4Addr;

use policy_tree::{
    Action, Check, Direction, Flow, LinearDb, Mark, PolicySpec, PolicyType, PolicyWriter, Selector,
    TemplateId, crossbeam_epoch,
};

const TUNNELS: u8 = 200;

fn tunnel(i: u8) -> Result<PolicySpec, policy_tree::Error> {
    let selector = Selector::new(
        format!("10.1.{i}.0/24").parse()?,
        format!("10.2.{i}.0/24").parse()?,
    )?;
    Ok(PolicySpec::new(selector, Direction::Fwd)
        .priority(100)
        .action(Action::Ipsec(TemplateId(u32::from(i)))))
}

/// What a dataplane does with each answer for a packet that arrived in plain: forward it,
/// drop it (a block policy, or a tunnel's policy that requires IPsec: the kernel's
/// `XfrmInTmplMismatch`), or hand it to the kernel (which holds the IPsec states).
fn disposition(check: Check<'_>) -> &'static str {
    match check {
        Check::Pass => "forward",
        Check::Drop(policy) if policy.action == Action::Block => "drop: blocked",
        Check::Drop(_) => "drop: requires IPsec",
        Check::DefaultBlock => "drop: default block",
        Check::Kernel(_) => "kernel",
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut db = PolicyWriter::new(); // shared (in an Arc) between control plane and run loops
    let mut reference = LinearDb::new();
    let mut add = |spec: PolicySpec| -> Result<(), policy_tree::Error> {
        db.add(spec)?;
        reference.add(spec)?;
        Ok(())
    };
    for i in 0..TUNNELS {
        add(tunnel(i)?)?;
    }
    let monitor_host = Selector::new("10.9.9.9/32".parse()?, "10.2.0.0/16".parse()?)?;
    add(PolicySpec::new(monitor_host, Direction::Fwd).priority(10))?;
    let blocked = Selector::new("10.1.250.0/24".parse()?, "0.0.0.0/0".parse()?)?;
    add(PolicySpec::new(blocked, Direction::Fwd)
        .priority(50)
        .action(Action::Block))?;

    let mut tally = std::collections::BTreeMap::<&str, u64>::new();
    let mut seed = 1u32;
    for batch in 0..500u32 {
        if batch % 50 == 25 {
            // The control plane: tunnel 7 goes down, or comes back.
            let spec = tunnel(7)?;
            if db
                .delete(
                    &spec.selector,
                    Direction::Fwd,
                    PolicyType::Main,
                    0,
                    Mark::ANY,
                )
                .is_ok()
            {
                reference.delete(
                    &spec.selector,
                    Direction::Fwd,
                    PolicyType::Main,
                    0,
                    Mark::ANY,
                )?;
            } else {
                db.add(spec)?;
                reference.add(spec)?;
            }
        }
        let guard = crossbeam_epoch::pin(); // once per batch
        for _ in 0..64 {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let [a, b, c, d] = seed.to_be_bytes();
            let src = match a % 4 {
                0 => Ipv4Addr::new(10, 9, 9, 9),
                1 => Ipv4Addr::new(10, 1, 250, d),
                _ => Ipv4Addr::new(10, 1, b % 8, d),
            };
            let dst = Ipv4Addr::new(10, 2, b % 8, c);
            let flow = Flow::v4(src, dst);
            let fast = db.check(&flow, Direction::Fwd, &guard);
            let slow = reference.check(&flow, Direction::Fwd);
            let same = match (fast, slow) {
                (Check::Drop(x), Check::Drop(y)) | (Check::Kernel(x), Check::Kernel(y)) => {
                    x.index == y.index
                }
                (x, y) => x == y,
            };
            if !same {
                return Err(format!("{src} -> {dst}: {fast:?}, reference {slow:?}").into());
            }
            *tally.entry(disposition(fast)).or_default() += 1;
        }
    }
    println!("32,000 forwarded packets checked against the linear scan: {tally:?}");
    for seen in ["forward", "drop: blocked", "drop: requires IPsec"] {
        assert!(
            tally.contains_key(seen),
            "no packet was decided as {seen:?}"
        );
    }
    Ok(())
}
