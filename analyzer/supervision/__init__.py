"""Every command runs in a supervised child: the parent (never imports JAX), the child's entry, and the
status protocol between them.
"""
