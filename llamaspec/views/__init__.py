"""Views: a stored sweep's report and plots (:mod:`.analysis`, :mod:`.plot`; the fit is
:mod:`llamaspec.decision.speedup_model`'s), run results
for people and machines (:mod:`.report`) and the machine's readiness (:mod:`.doctor`)."""
