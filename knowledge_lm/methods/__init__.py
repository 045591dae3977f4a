"""One module per method (a folder for one with its own pretraining: ``erica/``); each registers its classes with
``@register_method``. ``trainer.py``: the Lightning ``Trainer`` every method trains under."""
