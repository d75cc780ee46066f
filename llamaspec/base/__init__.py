"""What every room stands on: the one error type, files written whole, progress, where things are kept,
the one wrapper for child processes, the machine lock, this machine's facts (CPU, memory, GPUs, tools) and the
statistics every figure goes through. Nothing here knows speculative decoding."""
