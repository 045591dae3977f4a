"""Measurement tools beside the pipeline: step speed, LAMA probing, attention-map figures."""
