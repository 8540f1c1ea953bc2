"""JAX and XLA: the one adapter for JAX's private APIs, and a lowered target compiled and analysed."""
