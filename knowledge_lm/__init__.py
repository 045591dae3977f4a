"""knowledge-lm: does injecting knowledge into a language model help, and by how much."""

__version__ = "0.1.0"
