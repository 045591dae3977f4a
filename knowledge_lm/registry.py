"""Name → class registries for methods and datasets, filled by decorators at import time.

A new method or dataset is one new module under ``knowledge_lm.methods`` or ``knowledge_lm.data``
that decorates its class; ``import_all`` imports every such module so the registries are complete.
"""

import importlib
import pkgutil

from knowledge_lm.errors import KlmError


class Registry:
    def __init__(self, kind: str, package: str):
        self.kind = kind
        self.package = package
        self._entries: dict[str, type] = {}
        self._loaded = False

    def register(self, *names: str):
        def decorate(cls):
            for name in names:
                if name in self._entries and self._entries[name] is not cls:
                    raise ValueError(f"{self.kind} {name!r} registered twice")
                self._entries[name] = cls
            return cls

        return decorate

    def _load(self):
        if not self._loaded:
            package = importlib.import_module(self.package)
            for module in pkgutil.iter_modules(package.__path__):
                importlib.import_module(f"{self.package}.{module.name}")
            self._loaded = True

    def get(self, name: str) -> type:
        self._load()
        if name not in self._entries:
            raise KlmError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)


METHODS = Registry("method", "knowledge_lm.methods")
DATASETS = Registry("dataset", "knowledge_lm.data")
register_method = METHODS.register
register_dataset = DATASETS.register
