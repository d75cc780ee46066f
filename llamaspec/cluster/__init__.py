"""Studies spread over several machines: a coordinator shards work items over one worker per
machine, stores every result itself, and keeps each machine's speedups to its own baselines.

::

    from llamaspec.cluster import WorkItem, Requirements, run_items, LocalPool, StoreSink
    from llamaspec.cluster import raypool

    raypool.connect("10.0.0.5:6379")          # or RAY_ADDRESS; fails in seconds when nothing answers
    pool = raypool.RayPool()                 # one actor per machine (custom resource llamaspec:NAME)
    report = run_items("study-1", items, pool, StoreSink(Store.open()), Requirements(commit="0c1e570",
                       models={"smollm2-135m:f32": None, "smollm2-135m:q4_1": None}))
    summary.per_machine(store, "study-1")     # speedups per machine, each from its own baselines

Setting up machines (each with llamaspec and its ``cluster`` extra installed, same checkout)::

    # the head (it need not measure: no llamaspec resource)
    ray start --head --port 6379 --num-cpus 0 --include-dashboard false
    # every measuring machine, named once
    ray start --address HEAD:6379 --resources '{"llamaspec:box1": 1}'
    # anywhere
    llamaspec cluster machines --cluster HEAD:6379
    llamaspec run smollm2-quicksort --cluster HEAD:6379 -r 6 --split-repeats   # an experiment's repeats spread
    llamaspec sweep -m T.gguf -md D.gguf --cluster HEAD:6379                   # the study on every machine

Each machine builds llama.cpp and fetches the models itself on first use (cached, sha256-checked),
and is refused when its llama.cpp commit or a model's sha256 differs from the study's.

Modules: ``work`` (WorkItem, Requirements, WorkerInfo, the identity check), ``queue`` (pending /
in flight / done, per-machine throughput, ETA), ``coordinator`` (admission and the study loop over
the Pool/WorkerHandle/Sink interfaces), ``worker`` (MachineWorker: prepare = build + models with
llamaspec's own cached steps; execute = one item), ``executors`` (item kinds: ``pair``, ``study``),
``sink`` (the results store, machine in provenance), ``summary`` (per-machine speedups),
``local`` (threads) and ``raypool`` (Ray; the only module importing it).
"""

from llamaspec.cluster.coordinator import ItemsReport, admit, run_items
from llamaspec.cluster.local import LocalPool, WorkerLost
from llamaspec.cluster.sink import StoreSink, machine_of
from llamaspec.cluster.work import Requirements, WorkerInfo, WorkItem, mismatch

__all__ = ["LocalPool", "Requirements", "StoreSink", "ItemsReport", "WorkItem", "WorkerInfo", "WorkerLost", "admit",
           "machine_of", "mismatch", "run_items"]
