"""Seed 000's table and an FCT-vs-load figure for three fabric schemes,
from Python (the notebook reproduce.ipynb holds the same cells).

    python examples/python/reproduce.py [OUT_DIR]

Needs the fulcrum-sim package (docs/how-to/python.md); draws the figure
with matplotlib when it is installed, and prints both tables.
"""

import os
import sys
from concurrent.futures import ProcessPoolExecutor

import fulcrum

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# The published averages of the ns-3 model (docs/results/seed-000.md).
PUBLISHED_AVG = {"round-robin": 9.592, "least-request": 8.924, "random": 9.614,
                 "ring-hash": 9.370, "maglev": 8.713, "peak-ewma": 5.145}


def seed_000_table():
    """Mean over seeds 1..=20 of each algorithm's figures, and the share of
    requests sent to the 50 ms server."""
    r = fulcrum.sim(os.path.join(REPO, "scenarios/seed-000.toml"), runs=20)
    table = r.summary.groupby("algorithm", sort=False)[["avg_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms"]].mean()
    per = r.requests_per_server
    slow = per[per.name == "10.10.0.11"].groupby("algorithm", sort=False).requests.sum()
    table["to_50ms_server_%"] = 100 * slow / per.groupby("algorithm", sort=False).requests.sum()
    table.insert(0, "published_avg_ms", [PUBLISHED_AVG[a] for a in table.index])
    return table.round(3)


def fct_vs_load(executor, schemes=("ecmp", "letflow", "conga"), loads=(0.3, 0.5, 0.7), seeds=(1, 2)):
    """Average FCT (ms) on a 4×4×8 leaf-spine, web-search flows for 80 ms,
    per scheme and load, mean over seeds."""
    base = fulcrum.Spec.fabric(os.path.join(REPO, "scenarios/fabric/lb-4x4x8-symmetric.toml"),
                               set={"end": "100ms", "workload.launch_end": "80ms"}, threads=1)
    specs = fulcrum.grid(base, {"routing.scheme": schemes, "workload.load": loads}, seeds=seeds)
    results = fulcrum.run_all(specs, executor)
    rows = [{"scheme": s.sets[-2].split("=")[1].strip('"'), "load": float(s.sets[-1].split("=")[1]),
             "seed": s.seed, "avg_fct_ms": r.report["fct_ms"]["avg"]} for s, r in zip(specs, results)]
    import pandas as pd

    return pd.DataFrame(rows).groupby(["load", "scheme"]).avg_fct_ms.mean().unstack().round(3)


def main(out_dir):
    print("Seed 000 (mean of seeds 1..=20, ms)\n")
    print(seed_000_table().to_string(), "\n")
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        fct = fct_vs_load(pool)
    print("Average FCT (ms) by load, lb-4x4x8-symmetric\n")
    print(fct.to_string())
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    ax = fct.plot(marker="o")
    ax.set_xlabel("load")
    ax.set_ylabel("average FCT (ms)")
    os.makedirs(out_dir, exist_ok=True)
    plt.savefig(os.path.join(out_dir, "fct-vs-load.svg"))
    print(f"\nwrote {os.path.join(out_dir, 'fct-vs-load.svg')}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
