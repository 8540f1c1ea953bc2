"""Where independent candidates compile: this process, local child processes, or a Ray cluster."""
