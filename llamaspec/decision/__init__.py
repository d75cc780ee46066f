"""Decisions: the one decision rule (:mod:`.decide`), one answer for a workload (:mod:`.workload`),
the workload read back from stored runs (:mod:`.workload_runs`) and the speedup model fitted to
stored points (:mod:`.speedup_model`). Pure: no engine, no store writes."""
