"""A parsed configuration value in the form the Rust tests compare: every node tagged with its
type ({"int": "15"}, {"float": "1000.0"}, {"str": "x"}, {"bool": true}, {"null": null},
{"list": [...]}, {"map": [[key, TREE], ...]}), anything else {"other": repr}."""


def tree(node):
    # Hydra's QuotedString: a string, whatever it holds.
    if hasattr(node, "quote") and hasattr(node, "text"):
        return {"str": node.text}
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
