"""The analysis cache: finished target reports on disk, keyed by everything they depend on."""
