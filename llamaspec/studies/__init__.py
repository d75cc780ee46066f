"""Studies: the experiment schema, one run, sweeps, workload studies, tuning, studies of models named on
the command line, prompt sets and the deploy command of an answer. They call down into the measurement
core, the store, the decisions and the views; nothing below imports them."""
