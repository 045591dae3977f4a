"""One module per method (a folder for one with its own pretraining: ``erica/``), each named in
``knowledge_lm.core.catalog``'s ``METHOD_ENTRIES``; ``trainer.py``: the Lightning ``Trainer`` every method trains
under."""
