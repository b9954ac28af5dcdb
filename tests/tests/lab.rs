//! The virtual lab end to end (privileged): up, traffic through `fwd` over IPv4 and IPv6 to the
//! links and the extra prefixes, status, down, and nothing left behind.

use std::net::IpAddr;

use xfwd_lab::topology::{DST0, SRC0};
use xfwd_lab::{Lab, LabError, Role, netns};
use xfwd_tests::{canonical, udp_probe};

#[test]
fn lab_forwards_between_src_and_dst_and_leaves_nothing_behind() {
    if !xfwd_lab::privileged("lab_forwards_between_src_and_dst_and_leaves_nothing_behind") {
        return;
    }
    let lab = Lab::unique("labtest")
        .unwrap()
        .with_extra_prefixes(16, 28)
        .unwrap();
    // A namespace that shares the lab's prefix but is not the lab's: `down` must spare it.
    let bystander = netns::Netns::create(&format!("{}-bystander", lab.prefix())).unwrap();
    {
        let guard = lab.up_scoped().unwrap();
        let status = guard.status();
        assert!(status.is_up(), "{status}");
        let detail = |role: Role| {
            status
                .nodes
                .iter()
                .find(|n| n.role == role)
                .and_then(|n| n.detail.clone())
                .unwrap()
        };
        assert_eq!(detail(Role::Fwd).forwarding, Some(true), "{status}");
        assert_eq!(detail(Role::Src).forwarding, Some(false), "{status}");
        // Two connected routes plus the 16 extra prefixes; src and dst: connected + default.
        assert_eq!(detail(Role::Fwd).ipv4_routes, 18, "{status}");
        assert_eq!(detail(Role::Src).ipv4_routes, 2, "{status}");
        assert!(
            detail(Role::Src)
                .interfaces
                .iter()
                .any(|l| l.starts_with("src0")
                    && l.contains("198.18.0.2/24")
                    && l.contains("2001:db8:0:1::2/64"))
        );

        // The same lab cannot come up twice, and trying leaves it intact.
        assert!(matches!(lab.up(), Err(LabError::AlreadyUp(names)) if names.len() == 3));
        assert!(lab.status().is_up());

        let v4: Vec<_> = lab.extra_ipv4_prefixes().collect();
        let v6: Vec<_> = lab.extra_ipv6_prefixes().collect();
        assert_eq!((v4.len(), v6.len()), (16, 16));
        let (first4, last4) = (v4[0].0, v4[15].0);
        let (first6, last6) = (v6[0].0, v6[15].0);
        let targets: [IpAddr; 6] = [
            DST0.ipv4.into(),
            DST0.ipv6.into(),
            std::net::Ipv4Addr::from(u32::from(first4) + 1).into(),
            std::net::Ipv4Addr::from(u32::from(last4) + 15).into(),
            std::net::Ipv6Addr::from(u128::from(first6) + 1).into(),
            std::net::Ipv6Addr::from(u128::from(last6) + 0xabcd).into(),
        ];
        for to in targets {
            let peer = udp_probe(&lab.netns(Role::Src), &lab.netns(Role::Dst), to)
                .unwrap_or_else(|e| panic!("src -> {to}: {e:?}"));
            // Forwarded, not translated: dst sees src's own address.
            let expected: IpAddr = if to.is_ipv4() {
                SRC0.ipv4.into()
            } else {
                SRC0.ipv6.into()
            };
            assert_eq!(canonical(peer.ip()), expected, "src -> {to}");
        }
        // Addresses outside the extra prefixes are not routed to dst.
        let outside = std::net::Ipv4Addr::from(u32::from(last4) + 16);
        assert!(udp_probe(&lab.netns(Role::Src), &lab.netns(Role::Dst), outside.into()).is_err());
    }
    assert!(lab.status().is_down());
    let left: Vec<String> = netns::list()
        .into_iter()
        .filter(|name| name.starts_with(lab.prefix()))
        .collect();
    assert_eq!(left, [bystander.name().to_owned()]);
}
