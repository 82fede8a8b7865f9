"""A run's ``.hydra/config.yaml`` with its ``${...}`` references filled in, as plain data.

Runs keep the config Hydra composed (``.hydra/config.yaml``), whose values still hold
interpolations (``cache_dir: ${paths.data_dir}/prepared``). The report needs a few of them
resolved, but may not hand a stranger's file to OmegaConf's resolvers. So only three forms are
filled in, by text substitution: a reference to another key of the same config
(``${paths.data_dir}``), Hydra's runtime values from the run's ``.hydra/hydra.yaml``
(``${hydra:runtime.output_dir}``), and ``${oc.env:NAME,default}`` as its default (the
variable as the run saw it is not recorded, and the report's own environment is not the
run's; nor may a stranger's config copy it into the report). Any other form stays the string
it is.
"""

from __future__ import annotations

import re

INNERMOST = re.compile(r"\$\{([^${}]*)\}")
MAX_PASSES = 20  # nested or chained references; a cycle stops here, unresolved


def resolve(config: dict, hydra: object) -> dict:
    """``config`` with every string value's references filled in (see the module)."""

    def value(node: object) -> object:
        if isinstance(node, dict):
            return {k: value(v) for k, v in node.items()}
        if isinstance(node, list):
            return [value(v) for v in node]
        if isinstance(node, str):
            return _fill(node, config, hydra)
        return node

    return value(config)  # type: ignore[return-value]


def _fill(text: str, config: dict, hydra: object) -> object:
    for _ in range(MAX_PASSES):
        whole = INNERMOST.fullmatch(text)
        if whole:  # one reference: its value keeps its type (${seed} is an int)
            found = _reference(whole.group(1), config, hydra)
            if found is None or not isinstance(found, str):
                return text if found is None else found
            text = found
            continue
        filled = INNERMOST.sub(lambda m: _as_text(m, config, hydra), text)
        if filled == text:
            return text
        text = filled
    return text


def _as_text(match: re.Match, config: dict, hydra: object) -> str:
    found = _reference(match.group(1), config, hydra)
    return match.group(0) if found is None or isinstance(found, dict | list) else str(found)


def _reference(inner: str, config: dict, hydra: object) -> object:
    """The value ``${inner}`` names, or None for a form left as it is."""
    inner = inner.strip()
    if inner.startswith("oc.env:"):
        _, _, default = inner.partition(",")
        return default.strip() or None
    if inner.startswith("hydra:"):
        return _at(hydra.get("hydra") if isinstance(hydra, dict) else None, inner[6:])
    if ":" in inner:
        return None  # another resolver: never run
    return _at(config, inner)


def _at(data: object, dotted: str) -> object:
    for key in dotted.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data
