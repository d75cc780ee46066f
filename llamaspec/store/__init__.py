"""The results store: every run and measurement, with provenance, in SQLite (:mod:`.results`)."""
