"""The run in progress: the state the views render, the headless lines, live metrics."""
