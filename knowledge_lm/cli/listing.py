"""``klm list``: the registered methods and datasets, from the registries' entries."""

import json

from knowledge_lm.core.registry import DATASETS, METHODS


def list_entries() -> dict:
    """``klm list``'s content, from the entries (nothing imported): each method's one-line description, options
    and whether it needs ``klm prepare``; each dataset's description, tasks and default tasks."""
    methods = {
        name: {
            "description": entry.description,
            "options": list(entry.options),
            "needs_prepare": entry.needs_knowledge,
        }
        for name, entry in METHODS.items()
    }
    datasets = {
        name: {
            "description": entry.description,
            "tasks": list(entry.tasks),
            "default_tasks": list(entry.default_tasks or entry.tasks),
        }
        for name, entry in DATASETS.items()
    }
    return {"methods": methods, "datasets": datasets}


def command_list(args):
    entries = list_entries()
    if args.json:
        print(json.dumps(entries, indent=1))
        return 0
    print("methods:", ", ".join(entries["methods"]))
    for name, method in entries["methods"].items():
        print(f"  {name}: {method['description']}" + (" (needs klm prepare)" if method["needs_prepare"] else ""))
        if method["options"]:
            print(f"    options: {', '.join(method['options'])}")
    for name, dataset in entries["datasets"].items():
        print(
            f"dataset {name}: tasks {', '.join(dataset['tasks'])} (default {', '.join(dataset['default_tasks'])})"
            + (f"; {dataset['description']}" if dataset["description"] else "")
        )
    return 0


def add_parser(commands):
    listing = commands.add_parser(
        "list", help="registered methods (description, options, needs prepare) and datasets (tasks)"
    )
    listing.add_argument("--json", action="store_true", help="as one JSON object")
    listing.set_defaults(handler=command_list)
