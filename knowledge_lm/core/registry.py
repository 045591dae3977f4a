"""Name → class registries for methods, datasets and task kinds, resolved without importing.

A new method or dataset is one new module under ``knowledge_lm.methods`` or ``knowledge_lm.data`` (or in a folder
there, as ``methods/erica/``) whose class carries the registry's decorator, spelled ``@register_method("name", ...)``
(or ``register_dataset``, ``register_task_kind``) with string-literal names. The registry reads the package's
source files (``ast``) to know every name's ``module:Class`` without importing anything, so listing names,
checking a sweep's names and answering an unknown one cost no torch import; ``get`` imports only the module of
the class asked for. A class attribute such as a dataset's ``tasks`` is read from the source too where it is a
literal (or a module constant, or ``tuple()``/``list()`` of one), in the class or a base class the module
imports from the project; otherwise its module is imported and the attribute read from the class.

The decorators still register each class when its module is imported; that is how a class defined
outside the package (a test's, a plugin's) becomes known, and a module whose decorator names are not
literals is imported as soon as the names are needed.
"""

import ast
import importlib
import pkgutil
import re
from pathlib import Path
from typing import NamedTuple

from knowledge_lm.core.errors import KlmError

UNKNOWN = object()  # a value the source does not give without running it
ABSENT = object()  # an attribute a class and its bases do not define
SEQUENCE_BUILDERS = {"tuple": tuple, "list": list}


class StaticClass(NamedTuple):
    """A class as its module's source defines it, before any import."""

    module: str
    name: str


class ModuleSource:
    """One module's parsed source: its top-level classes, constants and ``from ... import`` names."""

    def __init__(self, module: str, tree: ast.Module):
        self.module = module
        self.classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        self.constants = assigned_values(tree.body)
        self.imported = {
            alias.asname or alias.name: f"{node.module}.{alias.name}"
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
            for alias in node.names
        }


def assigned_values(body: list[ast.stmt]) -> dict:
    """Name → the expression last assigned to it by a plain statement of ``body``; ``UNKNOWN`` where a
    nested statement (an ``if``, a loop) also assigns it, since which one holds depends on running it."""
    values = {}
    for statement in body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    values[target.id] = statement.value
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            if statement.value is not None:
                values[statement.target.id] = statement.value
        elif not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    values[node.id] = UNKNOWN
    return values


def decorator_names(node: ast.ClassDef, decorator: str) -> list[str] | None:
    """The names a class registers through ``@decorator("a", "b")``: ``[]`` when it carries no such
    decorator, ``None`` when the names are not string literals."""
    names = []
    for call in node.decorator_list:
        if not isinstance(call, ast.Call):
            continue
        called = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
        if called != decorator:
            continue
        if call.keywords or not all(isinstance(arg, ast.Constant) and isinstance(arg.value, str) for arg in call.args):
            return None
        names += [arg.value for arg in call.args]
    return names


class Registry:
    """The classes of one kind (``method``, ``dataset``, ...) by name: those ``package``'s modules decorate
    with ``decorator`` (default ``register_<kind>``), read from source, plus any registered at import."""

    def __init__(self, kind: str, package: str, decorator: str | None = None):
        self.kind = kind
        self.package = package
        self.decorator = decorator or f"register_{kind.replace(' ', '_')}"
        self._entries: dict[str, type] = {}  # registered at import
        self._static: dict[str, StaticClass] | None = None  # read from the package's source, on first use
        self._sources: dict[str, ModuleSource | None] = {}

    def register(self, *names: str):
        def decorate(cls):
            for name in names:
                if name in self._entries and self._entries[name] is not cls:
                    raise ValueError(f"{self.kind} {name!r} registered twice")
                found = self.static_table().get(name)
                if found is not None and found != StaticClass(cls.__module__, cls.__qualname__):
                    raise ValueError(f"{self.kind} {name!r} registered twice ({found.module}:{found.name} has it)")
                self._entries[name] = cls
            return cls

        return decorate

    # -- reading the package's source -------------------------------------------------------------
    def module_path(self, module: str) -> Path | None:
        """The source file of a module of the registry's top-level package (``knowledge_lm``), or ``None``
        for a module outside it."""
        top_level = self.package.partition(".")[0]
        if module.partition(".")[0] != top_level:
            return None
        base = Path(importlib.import_module(top_level).__path__[0]).parent.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None

    def package_modules(self) -> list[str]:
        """The package's modules, and those of its folders one level down (``methods/erica/``)."""
        directory = self.module_path(self.package).parent
        modules = []
        for info in pkgutil.iter_modules([str(directory)]):
            modules.append(f"{self.package}.{info.name}")
            if info.ispkg:
                modules += [
                    f"{self.package}.{info.name}.{inner.name}"
                    for inner in pkgutil.iter_modules([str(directory / info.name)])
                ]
        return modules

    def source(self, module: str) -> ModuleSource | None:
        if module not in self._sources:
            path = self.module_path(module)
            self._sources[module] = (
                None if path is None else ModuleSource(module, ast.parse(path.read_text(encoding="utf-8")))
            )
        return self._sources[module]

    def static_table(self) -> dict[str, StaticClass]:
        """Name → the class the package's source registers under it, read without importing. A module
        whose decorator names are not literals is imported instead (its classes register themselves)."""
        if self._static is None:
            self._static = {}
            unreadable = []
            for module in self.package_modules():
                if self.decorator not in self.module_path(module).read_text(encoding="utf-8"):
                    continue  # cheaper than parsing: most modules register nothing
                for node in self.source(module).classes.values():
                    names = decorator_names(node, self.decorator)
                    if names is None:
                        unreadable.append(module)
                        break
                    for name in names:
                        self._static[name] = StaticClass(module, node.name)
            for module in unreadable:
                importlib.import_module(module)
        return self._static

    def static_attribute(self, found: StaticClass, attribute: str, seen: frozenset = frozenset()):
        """A class attribute as the source gives it, searched in the class, then its bases left to right
        (Python's method resolution order while no class is reached twice); ``UNKNOWN`` where running the
        code is needed to know it, ``ABSENT`` where the class and its bases do not define it."""
        source = self.source(found.module)
        if found in seen or source is None or found.name not in source.classes:
            return UNKNOWN  # a diamond (where that order may differ from Python's) or a class outside the project
        node = source.classes[found.name]
        body_values = assigned_values(node.body)
        if attribute in body_values:
            return self.static_expression(body_values[attribute], source)
        if node.keywords:
            return UNKNOWN  # a metaclass may supply it
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id == "object":
                continue
            base_class = self.resolve_class(source, base.id) if isinstance(base, ast.Name) else None
            if base_class is None:
                return UNKNOWN
            value = self.static_attribute(base_class, attribute, seen | {found})
            if value is not ABSENT:
                return value
        return ABSENT

    def static_expression(self, node, source: ModuleSource):
        """``static_value`` of an expression of ``source``, where a bare name may also be a constant the module
        imports from another module of the project (``from knowledge_lm.tasks.multiple_choice import NO_KNOWLEDGE``)."""
        if isinstance(node, ast.Name) and node.id not in source.constants and node.id in source.imported:
            module, _, name = source.imported[node.id].rpartition(".")
            imported = self.source(module)
            if imported is not None and name in imported.constants:
                return self.static_expression(imported.constants[name], imported)
        return static_value(node, source)

    def resolve_class(self, source: ModuleSource, name: str) -> StaticClass | None:
        """Where a name used as a base class in ``source`` is defined: the same module, or the module it
        imports the name from (read only if of the same top-level package)."""
        if name in source.classes:
            return StaticClass(source.module, name)
        if name in source.imported:
            module, _, class_name = source.imported[name].rpartition(".")
            return StaticClass(module, class_name)
        return None

    # -- lookups ----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(set(self.static_table()) | set(self._entries))

    def check(self, name: str) -> None:
        """Raise the one-line ``KlmError`` for a name no class registers (nothing is imported)."""
        if name not in self._entries and name not in self.static_table():
            raise KlmError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")

    def locate(self, name: str) -> str:
        """``module:Class`` of the class registered under ``name``, without importing it."""
        self.check(name)
        if name in self._entries:
            return f"{self._entries[name].__module__}:{self._entries[name].__qualname__}"
        found = self._static[name]
        return f"{found.module}:{found.name}"

    def get(self, name: str) -> type:
        """The class registered under ``name``; its module is imported (that one only) if it was not."""
        self.check(name)
        if name not in self._entries:
            importlib.import_module(self._static[name].module)  # its decorator registers the class
        return self._entries[name]

    def class_attribute(self, name: str, attribute: str):
        """An attribute of the class registered under ``name`` (e.g. a dataset's ``tasks``): from the
        source where it is literal there, else from the imported class."""
        self.check(name)
        if name not in self._entries:
            value = self.static_attribute(self._static[name], attribute)
            if value is not UNKNOWN and value is not ABSENT:
                return value
        return getattr(self.get(name), attribute)

    def import_all(self) -> dict[str, type]:
        """Import every module of the package and return all registered classes by name."""
        for module in self.package_modules():
            importlib.import_module(module)
        return dict(self._entries)


def static_value(node, source: ModuleSource):
    """The value of an expression that needs no running: a literal, a module constant holding one, or
    ``tuple(...)`` / ``list(...)`` of those; ``UNKNOWN`` otherwise."""
    if node is UNKNOWN:
        return UNKNOWN
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        pass
    if isinstance(node, ast.Name) and node.id in source.constants:
        return static_value(source.constants[node.id], source)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in SEQUENCE_BUILDERS
        and len(node.args) == 1
        and not node.keywords
    ):
        value = static_value(node.args[0], source)
        try:
            return UNKNOWN if value is UNKNOWN else SEQUENCE_BUILDERS[node.func.id](value)
        except TypeError:  # not iterable: running the module raises there too
            return UNKNOWN
    return UNKNOWN


METHODS = Registry("method", "knowledge_lm.methods")
DATASETS = Registry("dataset", "knowledge_lm.data")
register_method = METHODS.register
register_dataset = DATASETS.register


def cannot_run(method: str, dataset: str) -> str | None:
    """Why ``method`` cannot run on ``dataset``, in one line, or None where it can: a method that reads knowledge
    features (its class's ``needs_knowledge``) on a dataset whose examples carry none (its ``no_knowledge`` says
    why). Read from the source where literal there, so ``klm bench`` refuses the pair before importing anything and
    the README gives the same reason for the cell it leaves empty."""
    if not METHODS.class_attribute(method, "needs_knowledge"):
        return None
    return DATASETS.class_attribute(dataset, "no_knowledge") or None


def static_class_node(registry: Registry, found: StaticClass):
    """The ``ast.ClassDef`` of ``found`` in its module's source, or None."""
    source = registry.source(found.module)
    return source.classes.get(found.name) if source is not None else None


DESCRIPTION_CHARS = 120  # a description's length in ``klm list``: one line


def class_description(registry: Registry, name: str) -> str:
    """The first line of the docstring of the class registered under ``name`` (of its nearest documented base
    where it has none), read from the source; "" where none is found."""
    registry.check(name)
    found, seen = registry.static_table().get(name), set()
    while found is not None and found not in seen:
        seen.add(found)
        node = static_class_node(registry, found)
        if node is None:
            break
        text = ast.get_docstring(node)
        if text:
            paragraph = " ".join(text.strip().split("\n\n")[0].split())
            sentence = re.split(r"(?<!Eq)(?<!e\.g)\.\s+(?=[A-Z(])", paragraph)[0].rstrip(".") + "."
            return sentence if len(sentence) <= DESCRIPTION_CHARS else sentence[: DESCRIPTION_CHARS - 1] + "…"
        bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
        found = registry.resolve_class(registry.source(found.module), bases[0]) if bases else None
    return ""


def option_fields(registry: Registry, name: str) -> list[str]:
    """The fields of the options dataclass (``options_class``) of the method registered under ``name``, with those of
    its bases, read from the source; [] where it has none or they cannot be read without running the code."""
    registry.check(name)
    found, seen = registry.static_table().get(name), set()
    options = None
    while found is not None and found not in seen and options is None:  # the class or a base that sets it
        seen.add(found)
        node, source = static_class_node(registry, found), registry.source(found.module)
        if node is None:
            return []
        value = assigned_values(node.body).get("options_class")
        if isinstance(value, ast.Name):
            options = registry.resolve_class(source, value.id)
            break
        bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
        found = registry.resolve_class(source, bases[0]) if bases else None
    chain, seen = [], set()  # the options class, then its bases
    while options is not None and options not in seen:
        seen.add(options)
        node = static_class_node(registry, options)
        if node is None:
            break
        chain.append(node)
        bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
        options = registry.resolve_class(registry.source(options.module), bases[0]) if bases else None
    fields = {}  # a field a subclass sets again keeps its base's place, as in a dataclass
    for node in reversed(chain):
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                fields.setdefault(statement.target.id, None)
    return list(fields)


def static_flag(registry: Registry, name: str, attribute: str) -> bool:
    """Whether the class registered under ``name`` sets ``attribute`` to True in its source (or a base's); nothing
    imported, so a flag the source does not give literally reads False."""
    registry.check(name)
    found = registry.static_table().get(name)
    return found is not None and registry.static_attribute(found, attribute) is True
