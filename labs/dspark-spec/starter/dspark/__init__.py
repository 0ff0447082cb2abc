"""DSpark-style speculative decoding on a tiny target (the dspark-spec lab)."""
