"""One module per command: what it does once its settings are known."""
