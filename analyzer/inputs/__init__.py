"""What a user hands us: scripts (imported on purpose), checked-in programs (never run), files and
their limits, pyproject settings.
"""
