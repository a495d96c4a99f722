"""The simulated users: conversations, pastes, the turn machinery and the load models."""
