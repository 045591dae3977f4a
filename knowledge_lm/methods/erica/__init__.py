"""ERICA: its model and objectives (``model.py``), its pretraining corpus (``corpus.py``) and its pretraining run
(``pretraining.py``)."""
