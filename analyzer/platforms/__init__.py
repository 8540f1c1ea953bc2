"""What a run compiles for: virtual CPUs, GPU and TPU compile-only targets, device presets and their
memory, device performance for step-time estimates.
"""
