"""The registry above the engines: which engines llamaspec knows, and what they lend the layers below.

``llamaspec.registry.engines`` finds an engine's module by the name an experiment gives
(``engine:``): llamaspec's own, declared in code, and those other packages install as Python entry
points (group ``llamaspec.engines``). It opens them, asks them for a deployment or the settings they
honour, and answers for what the engines lend the layers below them: the round profiles the speedup
model reads by program name, the tools that make model files, the cluster machines. Sitting above
the engines, it lets the measurement core, the models room and the speedup model name no engine's
module.
"""
