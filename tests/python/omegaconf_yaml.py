"""Reads YAML texts the way DLIO's configuration is read (OmegaConf's YAML loader, which is PyYAML's
SafeLoader with OmegaConf's changes), and prints each result in a form the Rust test compares:
one JSON line per text, {"value": TREE} or {"error": MESSAGE}, where TREE tags every node with its
type ({"int": "15"}, {"float": "1000.0"}, {"str": "x"}, {"bool": true}, {"null": null},
{"list": [...]}, {"map": [[key, TREE], ...]}).

Input: a JSON list of texts on standard input."""

import json
import sys

import yaml
from omegaconf._utils import get_yaml_loader


def tree(node):
    if node is None:
        return {"null": None}
    if isinstance(node, bool):
        return {"bool": node}
    if isinstance(node, int):
        return {"int": str(node)}
    if isinstance(node, float):
        return {"float": repr(node)}
    if isinstance(node, str):
        return {"str": node}
    if isinstance(node, list):
        return {"list": [tree(item) for item in node]}
    if isinstance(node, dict):
        return {"map": [[str(key), tree(value)] for key, value in node.items()]}
    return {"other": repr(node)}


for text in json.load(sys.stdin):
    try:
        loaded = yaml.load(text, Loader=get_yaml_loader())
        # An empty file is an empty configuration.
        print(json.dumps({"value": tree({} if loaded is None else loaded)}))
    except Exception as error:  # every refusal is a result to compare
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
