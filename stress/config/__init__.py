"""What a run is asked to do: the scenario as loaded and the plan decided from it once."""
