"""The measurement core: what a case asks for (spec types, settings), the contract every engine keeps
("run this case, give me timings, counters and text"), the one pairs rule, the speedup estimators
and the one summary of what a point measured. The engine registry sits above the engines
(``llamaspec.registry``)."""
