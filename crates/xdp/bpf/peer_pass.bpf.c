// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
//
// XDP_PASS and nothing else. A native-mode XDP_TX out of a veth reaches the
// peer only when the peer runs an XDP program too; scripts/xdp-topology
// puts this one on the bridge side of the LB's veth.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int peer_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
