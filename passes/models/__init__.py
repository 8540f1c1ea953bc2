"""The pydantic report models: what passes produce and reports render."""
