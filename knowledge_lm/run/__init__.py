"""Running cells: sweep configs, one cell, the sweep runner, the trainer and model builder, provenance."""
