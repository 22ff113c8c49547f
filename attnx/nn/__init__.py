"""Torch modules: score functions, attention mechanisms, encoders, decoders."""
