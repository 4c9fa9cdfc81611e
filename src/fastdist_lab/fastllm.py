"""Read the distributed section of a Fast-LLM config (YAML) as this project's layout fields.

ServiceNow's Fast-LLM is where this project's layout comes from: the fields of its ``DistributedConfig``
(``fast_llm/engine/distributed/config.py``) are ``Layout``'s. Every field of the two vintages is mapped
explicitly in ``FASTLLM_FIELDS``:

* Fast-LLM at commit 91b28fab (January 2026), the behaviour this project reproduces: phases training,
  validation, test and inference, the last two sharing ``test_seed_shift``;
* current Fast-LLM (from commit 3d0f7c1b, February 2026, to 229fd3f0, April 2026): no test phase, the inference
  phase's shift renamed ``inference_seed_shift`` (same default), plus ``use_cuda`` and ``force_cpu_initialization``.

Keys of older configs (``distributed_timeout``, ``training_dtype``, before 2025) are read too. Like Fast-LLM
(which refuses unknown fields), an unknown key is a ``LayoutError`` naming it and its line; so is a derived
field (``data_parallel``, ``tensor_rank``, ...), which Fast-LLM computes and does not accept in a config.

YAML is read within the loaders' bounds (``validation``), each refused in one line naming it before the work it would
cost (``load_yaml``): the text's size and encoding (``MAX_CONFIG_BYTES``), its nesting (``MAX_NESTING``), its values,
aliases expanded (``MAX_VALUES``: an anchor bomb stands for billions), its integers' digits (``MAX_DIGITS``). Pure
Python; PyYAML is imported only when text has to be parsed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import SEED_SHIFT_FIELDS
from .errors import LayoutError, WorldSizeNeeded
from .formatting import clipped, first_line, quoted
from .validation import MAX_NESTING, MAX_VALUES, check_digits, check_int, check_text, read_text

FASTLLM_COMMIT = "91b28fab"
"""The Fast-LLM commit whose ``DistributedConfig`` this project reproduces."""

_SAME = "same field in this project"

_DERIVED = (
    "data_parallel model_parallel num_nodes batch_data_parallel data_rank pipeline_rank tensor_rank sequence_data_rank "
    "batch_data_rank distributed_dims local_rank reference_config"
).split()
"""The fields Fast-LLM's ``DistributedConfig`` computes (and refuses in a config)."""

FASTLLM_FIELDS: dict[str, tuple[str, str | None, str]] = {
    # name: (kind, Layout field or None, explanation)
    "world_size": ("layout", "world_size", _SAME + " (the argument, when given, wins)"),
    "local_world_size": ("layout", "local_world_size", _SAME + " (the argument, when given, wins)"),
    "tensor_parallel": ("layout", "tensor_parallel", _SAME),
    "pipeline_parallel": ("layout", "pipeline_parallel", _SAME),
    "sequence_data_parallel": ("layout", "sequence_data_parallel", _SAME),
    "sequence_tensor_parallel": ("layout", "sequence_tensor_parallel", _SAME),
    "pipeline_first": ("layout", "pipeline_first", _SAME),
    "backend": ("layout", "backend", _SAME),
    "timeout": ("layout", "timeout", _SAME),
    "seed": ("layout", "seed", _SAME),
    "reproducible_init": ("layout", "reproducible_init", _SAME),
    **{name: ("layout", name, _SAME) for name in SEED_SHIFT_FIELDS if name != "test_seed_shift"},
    "test_seed_shift": ("layout", "test_seed_shift", "91b28fab vintage: shift of the test and inference phases"),
    "inference_seed_shift": (
        "layout",
        "test_seed_shift",
        "current vintage: the inference phase's shift, which this project (like 91b28fab) calls test_seed_shift",
    ),
    "distributed_timeout": ("layout", "timeout", "vintage before 2025-02: the old name of timeout"),
    "rank": ("ignored", None, "one process's rank; a Layout holds every rank"),
    "compute_dtype": ("ignored", None, "a data type; no effect on groups or seeds"),
    "optimization_dtype": ("ignored", None, "a data type; no effect on groups or seeds"),
    "training_dtype": ("ignored", None, "vintage before 2025-09: old name of compute_dtype; no effect on groups"),
    "use_cuda": ("ignored", None, "current vintage: device choice; no effect on groups or seeds"),
    "force_cpu_initialization": ("ignored", None, "current vintage: device choice; no effect on groups or seeds"),
    **dict.fromkeys(_DERIVED, ("derived", None, "computed by Fast-LLM, which refuses it in a config")),
}
"""Every key a Fast-LLM ``DistributedConfig`` has had, as (kind, Layout field, why): ``layout`` keys set a Layout
field, ``ignored`` keys are accepted and have no effect on a Layout, ``derived`` keys are refused."""

VINTAGE_KEYS: dict[str, str] = {
    "test_seed_shift": FASTLLM_COMMIT,
    "inference_seed_shift": "current",
    "use_cuda": "current",
    "force_cpu_initialization": "current",
    "distributed_timeout": "before 2025-02",
    "training_dtype": "before 2025-09",
}
"""Keys that only one vintage of Fast-LLM has, and that vintage."""

_OPTIONAL_NULL = ("world_size", "local_world_size", "rank")


@dataclass(frozen=True)
class FastLLMSettings:
    """What ``read_fastllm`` found: the ``Layout`` keyword arguments and where each came from.

    ``fields`` holds only the fields the source (or an argument) sets; ``Layout(**fields)`` gives the layout.
    """

    fields: dict[str, Any]
    source: str
    section: str
    vintage: str
    ignored: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """One paragraph: the source, the section, the vintage and what was ignored."""
        where = f"{self.section}" if self.section else "the top-level mapping"
        parts = [f"Fast-LLM config {self.source}: {where} (field names of Fast-LLM {self.vintage})"]
        if self.ignored:
            parts.append("ignored (no effect on a layout): " + ", ".join(self.ignored))
        parts.extend(self.notes)
        return "; ".join(parts)


def read_fastllm(
    source: str | os.PathLike | Mapping[str, Any],
    *,
    world_size: int | None = None,
    local_world_size: int | None = None,
) -> FastLLMSettings:
    """The layout fields of a Fast-LLM config: an experiment YAML (its ``model: distributed:`` section), a file
    holding a ``distributed:`` mapping, or the distributed fields themselves.

    ``source`` is a path, YAML text (any string with a line break) or an already parsed mapping. ``world_size``
    and ``local_world_size`` given here win over the file's; without either, the world size must be in the file
    and one node is assumed. Raises ``LayoutError`` naming the key (and its line) for anything malformed.
    """
    data, name, lines = _load(source)
    section, mapping, section_line = _find_section(data, name, lines)
    key_lines = lines.get(section, {}) if lines else {}
    where = f"{name}: {section + '.' if section else ''}"

    fields: dict[str, Any] = {}
    origin: dict[str, str] = {}
    ignored: list[str] = []
    vintages = sorted({VINTAGE_KEYS[k] for k in mapping if k in VINTAGE_KEYS})
    for key, value in mapping.items():
        at = f"{where}{clipped(str(key))}{_line(key_lines.get(key))}"
        if not isinstance(key, str) or key not in FASTLLM_FIELDS:
            raise LayoutError(f"{at}: not a field of Fast-LLM's DistributedConfig{_suggest(key)}")
        kind, target, why = FASTLLM_FIELDS[key]
        if kind == "derived":
            raise LayoutError(f"{at}: {why}; remove it")
        if value is None:
            if key in _OPTIONAL_NULL:
                continue
            raise LayoutError(f"{at}: null is not a value for {clipped(key)}")
        if kind == "ignored":
            if key == "rank":
                check_int(f"{at}: rank", value, minimum=0)
            ignored.append(key)
            continue
        assert target is not None
        if target in fields:
            raise LayoutError(f"{at}: sets {target} again (already set by {origin[target]}); keep one of the two")
        fields[target] = value
        origin[target] = key
    notes: list[str] = []
    if len(vintages) > 1:
        raise LayoutError(
            f"{name}: {section or 'the mapping'}{_line(section_line)} mixes keys of several Fast-LLM vintages "
            f"({', '.join(k for k in mapping if k in VINTAGE_KEYS)}); use the names of one"
        )
    for arg, value in (("world_size", world_size), ("local_world_size", local_world_size)):
        if value is not None:
            if arg in fields and fields[arg] != value:
                notes.append(f"{arg}={value} from the argument (the file says {fields[arg]})")
            fields[arg] = value
    if "world_size" not in fields:
        raise WorldSizeNeeded(
            f"{name}: {section or 'the mapping'} sets no world_size (Fast-LLM takes it from torchrun's WORLD_SIZE); "
            "pass the world size (world_size=..., --world-size)"
        )
    if "local_world_size" not in fields:
        fields["local_world_size"] = fields["world_size"]
        notes.append("one node (no local_world_size given)")
    vintage = vintages[0] if vintages else f"{FASTLLM_COMMIT} or current"
    return FastLLMSettings(fields, name, section, vintage, tuple(ignored), tuple(notes))


# ---------------------------------------------------------------------- reading
def _load(source: Any) -> tuple[Any, str, dict[str, dict[str, int]] | None]:
    """(parsed data, a name for messages, key lines per section or None for a mapping)."""
    if isinstance(source, Mapping):
        return source, "the mapping", None
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source and ":" not in source):
        path = os.fspath(source)
        name = clipped(os.path.basename(path))
        text = read_text(path, f"Fast-LLM config {quoted(path)}")
    elif isinstance(source, str):
        text, name = check_text(source, "the YAML text"), "the YAML text"
    else:
        raise LayoutError(f"source={quoted(source)} must be a path, YAML text or a mapping")
    return _parse_yaml(text, name)


def _parse_yaml(text: str, name: str) -> tuple[Any, str, dict[str, dict[str, int]]]:
    import yaml

    try:
        data, node = load_yaml(text, name)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = clipped(" ".join(str(error.problem or first_line(error)).split()), 120)
        raise LayoutError(f"{name}{line}: not valid YAML: {problem}") from None
    except yaml.YAMLError as error:
        raise LayoutError(f"{name}: not valid YAML: {clipped(first_line(error), 120)}") from None
    lines: dict[str, dict[str, int]] = {}
    if isinstance(node, yaml.MappingNode):
        _key_lines(node, "", lines, name)
        model = _child(node, "model")
        if isinstance(model, yaml.MappingNode):
            _key_lines(model, "model", lines, name)
            distributed = _child(model, "distributed")
            if isinstance(distributed, yaml.MappingNode):
                _key_lines(distributed, "model.distributed", lines, name)
        distributed = _child(node, "distributed")
        if isinstance(distributed, yaml.MappingNode):
            _key_lines(distributed, "distributed", lines, name)
    return data, name, lines


def load_yaml(text: str, name: str = "the YAML text", error: type[Exception] = LayoutError) -> tuple[Any, Any]:
    """``text`` parsed as YAML (PyYAML's safe loader, on libyaml when PyYAML has it): its data and its node tree
    (where each key is written).

    Its bounds are checked first, on the parser's events (``MAX_VALUES``, aliases expanded, and ``MAX_NESTING``);
    then an integer of more than ``MAX_DIGITS`` digits is refused before it is converted, and a value YAML cannot
    construct (a date such as 2001-13-45) is refused too, each by ``error`` in one line with its line. Malformed YAML
    raises PyYAML's ``YAMLError``.
    """
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    _yaml_bounds(yaml.parse(text, Loader=base), name, error)

    class BoundedLoader(base):  # type: ignore[misc, valid-type]
        """The safe loader whose construction errors are ``error`` naming the line."""

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep)
            except (yaml.YAMLError, error):
                raise
            except (ValueError, TypeError, KeyError, OverflowError) as failure:
                value = quoted(node.value) if isinstance(node, yaml.ScalarNode) else f"a {node.id}"
                line = node.start_mark.line + 1
                raise error(f"{clipped(name)} (line {line}): YAML cannot read {value}: {first_line(failure)}") from None

    def construct_int(loader: BoundedLoader, node: Any) -> int:
        check_digits(f"{clipped(name)} (line {node.start_mark.line + 1})", node.value, error=error)
        return yaml.SafeLoader.construct_yaml_int(loader, node)

    BoundedLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        return (loader.construct_document(node) if node is not None else None), node
    finally:
        loader.dispose()


def _yaml_bounds(events: Iterable[Any], name: str, error: type[Exception]) -> int:
    """The number of values a YAML document's parser ``events`` stand for, each alias counted as the values of the
    anchor it repeats; ``error`` naming the limit and the line as soon as that passes ``MAX_VALUES`` (an anchor bomb
    stands for billions), the nesting passes ``MAX_NESTING`` or an alias is inside its own anchor."""
    import yaml

    opened: list[list[Any]] = []  # [anchor, values so far] of each open sequence or mapping
    sizes: dict[str, int] = {}
    total = 0
    for event in events:
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = opened.pop()
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
            at = f"{clipped(name)} (line {event.start_mark.line + 1})"
            anchor, size = event.anchor, 1
            if isinstance(event, yaml.AliasEvent):
                if any(anchor == open_anchor for open_anchor, _ in opened):
                    raise error(f"{at}: the alias *{clipped(anchor, 40)} is inside its own anchor")
                anchor, size = None, sizes.get(anchor, 1)  # an alias never defined: the composer says so
            total += size
            if total > MAX_VALUES:
                raise error(f"{at}: {total:,} values so far, aliases expanded (more than MAX_VALUES={MAX_VALUES:,})")
            if isinstance(event, yaml.CollectionStartEvent):
                if len(opened) >= MAX_NESTING:
                    raise error(f"{at}: nested more than MAX_NESTING={MAX_NESTING} levels deep")
                opened.append([anchor, 1])
                continue
        else:
            continue
        if anchor:
            sizes[anchor] = size
        if opened:
            opened[-1][1] += size
    return total


def _child(node: Any, key: str) -> Any:
    for key_node, value_node in node.value:
        if getattr(key_node, "value", None) == key:
            return value_node
    return None


def _key_lines(node: Any, path: str, out: dict[str, dict[str, int]], name: str) -> None:
    """Record each key's 1-based line; a key given twice is refused (YAML would silently keep the last)."""
    seen: dict[str, int] = {}
    for key_node, _ in node.value:
        key, line = getattr(key_node, "value", None), key_node.start_mark.line + 1
        if isinstance(key, str) and key in seen:
            where = clipped(f"{path}.{key}" if path else key)
            raise LayoutError(f"{name}: {where} is given twice (lines {seen[key]} and {line}); keep one")
        if isinstance(key, str):
            seen[key] = line
    out[path] = seen


def _find_section(data: Any, name: str, lines: dict[str, dict[str, int]] | None) -> tuple[str, Mapping, int | None]:
    """The distributed mapping: ``model.distributed``, a top-level ``distributed``, or the fields themselves."""
    if not isinstance(data, Mapping):
        raise LayoutError(f"{name}: expected a mapping (a Fast-LLM config), got {type(data).__name__}")
    top = (lines or {}).get("", {})
    if "model" in data:
        model = {} if data["model"] is None else data["model"]
        if not isinstance(model, Mapping):
            raise LayoutError(f"{name}: model{_line(top.get('model'))} must be a mapping")
        section = model.get("distributed", {})
        line = (lines or {}).get("model", {}).get("distributed")
        path = "model.distributed"
    elif "distributed" in data:
        section, line, path = data["distributed"], top.get("distributed"), "distributed"
    elif data and all(isinstance(k, str) and k in FASTLLM_FIELDS for k in data):
        return "", data, None
    else:
        keys = clipped(", ".join(map(str, list(data)[:8]))) or "none"
        raise LayoutError(
            f"{name}: no 'model: distributed:' section and no 'distributed:' mapping (top-level keys: {keys})"
        )
    section = {} if section is None else section
    if not isinstance(section, Mapping):
        raise LayoutError(f"{name}: {path}{_line(line)} must be a mapping, got {type(section).__name__}")
    return path, section, line


def _line(line: int | None) -> str:
    return f" (line {line})" if line else ""


def _suggest(key: Any) -> str:
    from difflib import get_close_matches  # only on an error

    close = get_close_matches(str(key), list(FASTLLM_FIELDS), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
