"""The TUI's widgets: each renders one part of a ``Snapshot`` and repaints only on change."""
