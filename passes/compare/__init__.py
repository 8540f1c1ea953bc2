"""Two analyses side by side: the gate's baseline, rewrite's before/after, sweep's ranking."""
