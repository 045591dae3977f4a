"""One cell: sweep configs and training settings, the model and data builder, the cell, its claim, identity and
provenance; KnowBERT's pretraining. A sweep of cells is ``knowledge_lm.sweep``'s."""
