"""The run directory's files as they are written, and the frames between processes."""
