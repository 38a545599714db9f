// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
//
// Benchmark build only: lb.bpf.c compiled with -DFULCRUM_BENCH (build.rs
// makes lb_bench.bpf.o next to lb.bpf.o; the control plane never loads it).
//
// BPF_PROG_TEST_RUN with `repeat` runs the program N times on one buffer and
// does not restore it in between, so a NAT rewrite turns every repetition
// after the first into a different packet, and a new flow is new only once.
// The prologue below, run before the program proper, makes repetitions
// measurable: with BENCH_RESTORE it copies the frame's first BENCH_LEN bytes
// (BENCH_LEN6 for IPv6) back to what the first repetition of the call saw
// (NAT hits repeat), with
// BENCH_NEW_FLOWS it also gives every repetition a source address and port
// never used before on this CPU (every repetition is a new flow: conntrack
// miss, service lookup, flow hash, table read, inserts); with BENCH_UNCACHED
// it restores the frame and empties the flow's entry in this CPU's flow
// cache (a conntrack hit through the conntrack map). The program after
// the prologue is the production program, instruction for instruction in
// its source; the prologue's own cost is measured by running the same
// variant on a path it does not change (bench/xdp-cost subtracts it).

#define BENCH_LEN 56 /* Ethernet, IPv4 and TCP headers (54), rounded up to 8 */
#define BENCH_LEN6 80 /* Ethernet, IPv6 and TCP headers (74), rounded up to 8 */

enum {
	BENCH_OFF = 0,
	BENCH_RESTORE = 1,
	BENCH_NEW_FLOWS = 2,
	BENCH_UNCACHED = 3,
};

/* Written by userspace before each BPF_PROG_TEST_RUN call. */
struct bench_config {
	__u32 mode; /* BENCH_* */
	__u32 call; /* changed for every call: the first repetition saves the frame */
};

/* The frame the call was given. Not per CPU: a call that reschedules can
 * carry on on another CPU. */
struct bench_frame {
	__u32 call;
	__u32 pad;
	__u64 frame[BENCH_LEN6 / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_config);
} bench_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_frame);
} bench_frame SEC(".maps");

/* Flows made on this CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_flows SEC(".maps");

static __always_inline void bench_prologue(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct bench_config *cfg = bpf_map_lookup_elem(&bench_config, &zero);
	struct bench_frame *st = bpf_map_lookup_elem(&bench_frame, &zero);
	__u32 *next = bpf_map_lookup_elem(&bench_flows, &zero);
	__u64 *data = (void *)(long)ctx->data;
	if (!cfg || !st || !next || cfg->mode == BENCH_OFF || (void *)data + BENCH_LEN > (void *)(long)ctx->data_end)
		return;
	/* The Ethernet type is never rewritten: it says how much to restore. */
	int v6 = ((struct ethhdr *)data)->h_proto == bpf_htons(ETH_P_IPV6);
	if (st->call != cfg->call) {
		for (int i = 0; i < BENCH_LEN / 8; i++)
			st->frame[i] = data[i];
		if (v6 && (void *)data + BENCH_LEN6 <= (void *)(long)ctx->data_end)
			for (int i = BENCH_LEN / 8; i < BENCH_LEN6 / 8; i++)
				st->frame[i] = data[i];
		st->call = cfg->call;
	} else {
		for (int i = 0; i < BENCH_LEN / 8; i++)
			data[i] = st->frame[i];
		if (v6 && (void *)data + BENCH_LEN6 <= (void *)(long)ctx->data_end)
			for (int i = BENCH_LEN / 8; i < BENCH_LEN6 / 8; i++)
				data[i] = st->frame[i];
	}
	if (cfg->mode == BENCH_UNCACHED && v6) {
		struct ipv6hdr *ip6 = (void *)data + sizeof(struct ethhdr);
		if ((void *)data + BENCH_LEN6 > (void *)(long)ctx->data_end)
			return;
		struct flow_key6 key = flow_key6_of(ip6, (void *)(ip6 + 1));
		struct cache_ref c = cache_ref(&flow_cache6, (const __u64 *)&key, 5);
		ct_cache(&c, (const __u64 *)&key, 5, 0, 0, CT_SYN, 0);
	} else if (cfg->mode == BENCH_UNCACHED) {
		struct iphdr *ip = (void *)data + sizeof(struct ethhdr);
		struct flow_key key = flow_key_of(ip, (void *)(ip + 1));
		struct cache_ref c = cache_ref(&flow_cache, (const __u64 *)&key, 2);
		ct_cache(&c, (const __u64 *)&key, 2, 0, 0, CT_SYN, 0);
	}
	if (cfg->mode == BENCH_NEW_FLOWS) {
		__u32 n = (*next)++;
		struct ethhdr *eth = (void *)data;
		if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
			/* The source's low 64 bits: <cpu>, n. */
			struct ipv6hdr *ip6 = (void *)(eth + 1);
			ip6->saddr.in6_u.u6_addr32[2] = bpf_htonl(bpf_get_smp_processor_id());
			ip6->saddr.in6_u.u6_addr32[3] = bpf_htonl(n);
			return;
		}
		/* 11.<cpu>.x.y, port from the high bits: 2^32 flows per CPU.
		 * Checksums are left wrong: the program does not verify them. */
		struct iphdr *ip = (void *)(eth + 1);
		__u16 *sport = (void *)(ip + 1);
		ip->saddr = bpf_htonl(0x0b000000 | (bpf_get_smp_processor_id() & 0xff) << 16 | (n & 0xffff));
		*sport = bpf_htons((__u16)(n >> 16));
	}
}
