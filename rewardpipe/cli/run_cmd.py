"""Placeholder: commands registered by their owning module."""
