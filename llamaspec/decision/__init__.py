"""Decisions: the one decision rule (:mod:`.decide`), one answer for a workload (:mod:`.workload`) and
the workload read back from stored runs (:mod:`.workload_runs`). Pure: no engine, no store writes."""
