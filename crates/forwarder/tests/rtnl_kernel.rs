//! The binary's own rtnetlink requests (`forwarder::rtnl`, no iproute2 at run time) against
//! the live kernel, in a throwaway namespace: reading a link, bringing it up, and seeing
//! xfwd's XDP program attached and gone (`IFLA_XDP`, the program's name through bpf).
//! Privileged (root): namespaces, veth, XDP.

use forwarder::rtnl::{self, XdpMode};
use forwarder::xdp::{PROGRAM_NAME, XdpProgram, attached_program};
use xfwd_lab::netns::Netns;

#[test]
fn links_up_and_xdp_attachments_through_netlink() {
    if !xfwd_lab::privileged("links_up_and_xdp_attachments_through_netlink") {
        return;
    }
    let ns = Netns::create(&format!("xfwd-rtnl-{}-0", std::process::id())).unwrap();
    ns.ip([
        "link",
        "add",
        "r0",
        "address",
        "02:00:00:00:72:01",
        "type",
        "veth",
        "peer",
        "name",
        "r1",
    ])
    .unwrap();
    ns.ip(["link", "set", "dev", "r1", "up"]).unwrap();
    ns.run(|| {
        let link = rtnl::link("r0").unwrap();
        assert_eq!(link.mac, Some([2, 0, 0, 0, 0x72, 1]));
        assert!(!link.up);
        assert_eq!(link.xdp, None);
        rtnl::set_up(link.index).unwrap();
        assert!(rtnl::link("r0").unwrap().up);
        assert_eq!(
            rtnl::set_up(999_999).unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );

        let mut program = XdpProgram::load().unwrap();
        program.attach("r0", link.index, true).unwrap();
        let attached = attached_program("r0").expect("our program is attached");
        assert_eq!(attached.name, PROGRAM_NAME);
        assert_eq!(attached.mode, XdpMode::Generic);
        assert_eq!(
            rtnl::link("r0").unwrap().xdp.map(|x| x.prog_id),
            Some(attached.id)
        );
        // Attached through a BPF link: netlink may not take it away (only the link's owner).
        let refused = rtnl::detach_xdp(link.index, XdpMode::Generic).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::EBUSY), "{refused}");
        program.detach(link.index);
        assert_eq!(attached_program("r0"), None);
    })
    .unwrap();
}
