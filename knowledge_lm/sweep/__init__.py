"""Sweeps: planning the cells of a sweep, running them (locally, in workers, through the server or a scheduler),
the GPUs they share (MPS) and the stored results they fill in; one cell itself is ``knowledge_lm.run``."""
