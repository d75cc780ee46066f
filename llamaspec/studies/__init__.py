"""Studies: the experiment schema, one run, sweeps, workload studies, tuning, studies of models named on
the command line, prompt sets and the deploy command of an answer. They call down into the measurement
core, the store and the decisions; nothing below imports them (the views above render what they keep)."""
