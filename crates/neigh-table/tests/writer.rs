//! The writer handles: readers hold the `Arc` the writer hands out (they cannot write: see the
//! `compile_fail` doctests of `src/writer.rs`) and see exactly what the writer published.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use neigh_table::{
    DevConf, DevConfWriter, Ingress, Link, LinkWriter, NETCONF_ALL, NeighWriter, Neighbour,
    NudState,
};

#[test]
fn readers_see_what_the_writers_published() {
    let (mut neigh, mut links, mut devconf) = (
        NeighWriter::new(),
        LinkWriter::new(),
        DevConfWriter::followed(),
    );
    let (n, l, d) = (
        Arc::clone(neigh.reader()),
        Arc::clone(links.reader()),
        Arc::clone(devconf.reader()),
    );
    for i in 0..500u32 {
        let addr = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        neigh.upsert(Neighbour::new(
            1 + i % 4,
            addr,
            Some([2, 0, 0, 0, 0, i as u8]),
            NudState::REACHABLE,
        ));
        links.upsert(Link::new(1 + i % 50, format!("eth{}", i % 50)));
    }
    neigh.remove_ifindex(2);
    neigh.retain(|x| x.addr != IpAddr::V4(Ipv4Addr::from(0x0a00_0001)));
    links.remove(7);
    let on = DevConf {
        forwarding: Some(true),
        rp_filter: Some(0),
    };
    devconf.update(false, NETCONF_ALL, on);
    devconf.update(
        false,
        3,
        DevConf {
            forwarding: Some(false),
            rp_filter: None,
        },
    );
    assert_eq!(n.to_vec(), neigh.to_vec());
    assert_eq!((n.len(), n.generation()), (neigh.len(), neigh.generation()));
    assert_eq!(l.to_vec(), links.to_vec());
    assert_eq!(l.generation(), links.generation());
    let guard = crossbeam_epoch::pin();
    for i in 0..8 {
        assert_eq!(
            d.ingress(i, false, &guard),
            devconf.ingress(i, false, &guard)
        );
    }
    assert_eq!(d.ingress(3, false, &guard), Ingress::ForwardingOff);
    // The writers gone, the tables stay as they were.
    let before = (n.to_vec(), l.to_vec());
    drop((neigh, links, devconf));
    assert_eq!((n.to_vec(), l.to_vec()), before);
    assert_eq!(d.ingress(3, false, &guard), Ingress::ForwardingOff);
}
