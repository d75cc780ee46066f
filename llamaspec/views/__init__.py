"""Views: a stored sweep turned into conclusions and plots (:mod:`.analysis`, :mod:`.plot`), run results
for people and machines (:mod:`.report`) and the machine's readiness (:mod:`.doctor`)."""
