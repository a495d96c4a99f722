"""Running a scenario: the event loop, and (as the package grows) the run's session."""
