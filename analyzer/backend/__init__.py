"""A lowered target compiled and analysed: the one front end (devices, script, targets), the analysis
cache in use, checked-in programs, out_shardings checked by compiling them. JAX's private APIs are
the adapter's (analyzer/adapter/), reached through it."""
