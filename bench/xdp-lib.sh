# Shared by bench/xdp-latency and bench/xdp-throughput (sourced, not run):
# the namespace topology of scripts/xdp-topology with `fulcrum backend` on
# port 80 of each backend, processes tracked by PID and cleaned up on exit.
# Expects FULCRUM (the binary) and P (the namespace prefix) to be set.

VIP=10.202.1.1
BACKENDS=(10.202.0.11 10.202.0.12 10.202.0.13)
PIDS=()
PIN_DIR=/sys/fs/bpf/$P
# PRIO, an array the sourcing bench may set (e.g. (chrt -f 50)), prefixes
# the backends' command; unset, it adds nothing.

cleanup() {
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
	rm -rf "$PIN_DIR"
	scripts/xdp-topology down "$P"
}
trap cleanup EXIT

in_ns() { # NODE COMMAND…: run inside PREFIX-NODE (nsenter keeps bpffs visible)
	local node=$1
	shift
	nsenter --net=/run/netns/"$P-$node" "$@"
}

bg_in_ns() { # NODE COMMAND…: start in the background, remember the PID
	local node=$1
	shift
	nsenter --net=/run/netns/"$P-$node" "$@" >/dev/null 2>&1 &
	PIDS+=($!)
}

wait_port() { # NODE IP PORT: until something listens there (10 s at most)
	for _ in $(seq 100); do
		if in_ns "$1" bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "nothing listens on $2:$3 in $P-$1" >&2
	return 1
}

topology() { # MODE: (re)build the topology and start the backends
	cleanup
	scripts/xdp-topology up "$P" "$1"
	for i in 1 2 3; do
		bg_in_ns "b$i" "${PRIO[@]}" "$FULCRUM" backend --listen 0.0.0.0:80 --threads 1
	done
	for i in 1 2 3; do
		wait_port c "${BACKENDS[$((i - 1))]}" 80
	done
}

lb_create() { # ARGS…: fulcrum lb create VIP --tcp=PORT ARGS… on the LB's eth0, for each PORT of
	# the array LB_PORTS (80 unless set) (XDP_MODE: native unless set)
	local port
	in_ns lb "$FULCRUM" lb --pin-dir "$PIN_DIR" reset
	for port in "${LB_PORTS[@]:-80}"; do
		in_ns lb "$FULCRUM" lb --pin-dir "$PIN_DIR" create "$VIP" --tcp="$port" \
			--endpoints="$(IFS=,; echo "${BACKENDS[*]}")" --iface eth0 --xdp-mode "${XDP_MODE:-native}" "$@" >/dev/null
	done
}

machine() {
	echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), Linux $(uname -r)"
}
