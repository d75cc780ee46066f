"""Everything that knows llama.cpp's quirks lives in this subpackage.

Where its source comes from (``source``), how to build it (``build``), which flag names and
binaries each generation has (``flags``), how its output reads (``parse``). When llama.cpp
renames a flag again, this folder changes and nothing else notices.
"""
