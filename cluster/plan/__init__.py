"""Planning (pure): variants, run keys, execution order, reservations, fairness and preflight rules."""
