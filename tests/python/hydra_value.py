"""Reads override-word values the way Hydra reads `++a=VALUE` (its override grammar), and prints
each result in the form tests/python/omegaconf_yaml.py uses: one JSON line per value, {"value":
TREE} or {"error": MESSAGE}. Sweeps and functions, which a single run cannot take, print
{"other": ...}.

Input: a JSON list of values on standard input."""

import json
import sys

from hydra.core.override_parser.overrides_parser import OverridesParser

from tagged_tree import tree

parser = OverridesParser.create()
for value in json.load(sys.stdin):
    try:
        override = parser.parse_override(f"++a={value}")
        print(json.dumps({"value": tree(override._value)}))
    except Exception as error:  # every refusal is a result to compare
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
