"""``klm list``: the registered methods and datasets, read from the source."""

import json

from knowledge_lm.core.registry import DATASETS, METHODS, class_description, option_fields, static_flag


def list_entries() -> dict:
    """``klm list``'s content, read from the source (nothing imported): each method's one-line description, options
    and whether it needs ``klm prepare``; each dataset's description, tasks and default tasks."""
    methods = {
        name: {
            "description": class_description(METHODS, name),
            "options": option_fields(METHODS, name),
            "needs_prepare": static_flag(METHODS, name, "needs_knowledge"),
        }
        for name in METHODS.names()
    }
    datasets = {}
    for name in DATASETS.names():
        tasks = list(DATASETS.class_attribute(name, "tasks"))
        default_tasks = list(DATASETS.class_attribute(name, "default_tasks") or tasks)
        datasets[name] = {
            "description": class_description(DATASETS, name),
            "tasks": tasks,
            "default_tasks": default_tasks,
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
