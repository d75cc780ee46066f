"""What does spreading a study over Ray cost, and what does a second node bring?

Inside a loopback-only network namespace (the script re-runs itself under ``unshare -n``; Ray
binds non-loopback addresses otherwise), on a local Ray cluster of one and then two nodes (each a
``llamaspec:NAME`` machine), and on local threads without Ray:

- overhead per task: no-op work items through the whole coordinator (queue, actor call, result,
  store write), wall time over items, in ms;
- throughput: CPU-bound items (``--spin`` seconds of pure Python each) in items per second, one
  node against two. On a 2-core machine shared with other work the cores bound the gain: two
  nodes cannot beat 2x, and only reach it when both cores are free.

    .venv/bin/python benchmarks/cluster_overhead.py [--tasks 200] [--spin 0.25] [--spin-tasks 16]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INSIDE = "LLAMASPEC_BENCH_NETNS"


def reexec_in_netns() -> int:
    if not (shutil.which("unshare") and shutil.which("ip")):
        print("needs unshare and ip (util-linux, iproute2) to keep Ray on loopback", file=sys.stderr)
        return 2
    argv = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", sys.executable, *sys.argv]
    return subprocess.run(argv, env={**os.environ, INSIDE: "1"}).returncode


def study(pool, items, name: str, store) -> tuple[float, dict]:
    from llamaspec.cluster import Requirements, StoreSink, run_items

    t0 = time.perf_counter()
    report = run_items(name, items, pool, StoreSink(store), Requirements(engine=None), on_progress=lambda _l: None,
                       progress_every=60)
    return time.perf_counter() - t0, report.per_machine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=200, help="no-op items for the overhead")
    parser.add_argument("--spin", type=float, default=0.25, help="seconds of CPU per throughput item")
    parser.add_argument("--spin-tasks", type=int, default=16, help="throughput items")
    args = parser.parse_args()
    if os.environ.get(INSIDE) != "1":
        return reexec_in_netns()

    import logging

    import ray
    from ray.cluster_utils import Cluster

    from llamaspec.cluster import LocalPool, WorkItem, raypool
    from llamaspec.store.results import Store

    logging.basicConfig(level=logging.WARNING)
    temp = tempfile.mkdtemp(prefix="lsbench-", dir="/tmp")
    store = Store.open(Path(temp) / "results.sqlite")
    noop = [WorkItem(f"n{i}", "noop", {}) for i in range(args.tasks)]
    spin = [WorkItem(f"s{i}", "noop", {"spin": args.spin}) for i in range(args.spin_tasks)]
    print(f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}); {args.tasks} no-op items, "
          f"{args.spin_tasks} items of {args.spin} s CPU")

    local = LocalPool(["local"])
    study(local, [WorkItem(f"w{i}", "noop", {}) for i in range(4)], "local-warm", store)
    seconds, _ = study(local, noop, "local-noop", store)
    print(f"threads, no Ray:   overhead {1000 * seconds / args.tasks:6.2f} ms/task")
    seconds, _ = study(local, spin, "local-spin", store)
    print(f"threads, no Ray:   throughput {args.spin_tasks / seconds:5.2f} items/s ({seconds:.1f} s)")
    local.close()

    t0 = time.perf_counter()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                      "node_ip_address": "127.0.0.1", "temp_dir": temp})
    first = c.add_node(num_cpus=1, resources={"llamaspec:node-1": 1}, node_ip_address="127.0.0.1")
    c.wait_for_nodes()
    raypool.connect(c.address)
    print(f"Ray cluster up in {time.perf_counter() - t0:.1f} s")
    results = {}
    for nodes in (1, 2):
        if nodes == 2:
            c.add_node(num_cpus=1, resources={"llamaspec:node-2": 1}, node_ip_address="127.0.0.1")
            c.wait_for_nodes()
        pool = raypool.RayPool()
        study(pool, [WorkItem(f"w{nodes}-{i}", "noop", {}) for i in range(4)], f"warm-{nodes}", store)  # actors up
        seconds, _ = study(pool, [WorkItem(f"{nodes}-{i.key}", "noop", {}) for i in noop], f"ray{nodes}-noop", store)
        overhead = 1000 * seconds / args.tasks
        seconds, per = study(pool, [WorkItem(f"{nodes}-{i.key}", "noop", i.payload) for i in spin], f"ray{nodes}-spin", store)
        results[nodes] = args.spin_tasks / seconds
        split = ", ".join(f"{m} {p['done']}" for m, p in sorted(per.items()))
        print(f"Ray, {nodes} node{'s' if nodes > 1 else ' '}:       overhead {overhead:6.2f} ms/task;"
              f" throughput {results[nodes]:5.2f} items/s ({seconds:.1f} s; {split})")
        pool.close()
    print(f"two nodes / one node: {results[2] / results[1]:.2f}x (bound: 2 cores, shared with whatever else runs)")
    del first
    ray.shutdown()
    c.shutdown()
    store.close()
    shutil.rmtree(temp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
