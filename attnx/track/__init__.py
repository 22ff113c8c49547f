"""Run records, loggers' helpers and attention-map callbacks."""
