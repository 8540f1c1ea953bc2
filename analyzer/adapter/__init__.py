"""The one place JAX's private APIs are used (and what native code writes while JAX loads)."""
