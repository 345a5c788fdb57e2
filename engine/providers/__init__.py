"""Which model serves each space, and calling remote providers without letting them stall Quarry."""
