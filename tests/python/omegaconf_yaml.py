"""Reads YAML texts the way DLIO's configuration is read (OmegaConf's YAML loader, which is PyYAML's
SafeLoader with OmegaConf's changes), and prints each result in a form the Rust test compares:
one JSON line per text, {"value": TREE} or {"error": MESSAGE}, TREE as tagged_tree.py makes it.

Input: a JSON list of texts on standard input."""

import json
import sys

import yaml
from omegaconf._utils import get_yaml_loader

from tagged_tree import tree

for text in json.load(sys.stdin):
    try:
        loaded = yaml.load(text, Loader=get_yaml_loader())
        # An empty file is an empty configuration.
        print(json.dumps({"value": tree({} if loaded is None else loaded)}))
    except Exception as error:  # every refusal is a result to compare
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
