"""IOB2, the tagging scheme of token-classification tasks: ``B-TYPE`` begins an entity,
``I-TYPE`` continues it, ``O`` is outside any. Checking a sequence, converting IOB1 to it,
repairing a predicted sequence, and reading its entities."""

from __future__ import annotations

from typing import Any


def iob2_problem(tags: list[str]) -> tuple[int, str] | None:
    """(position, problem) of the first tag IOB2 does not allow, else None."""
    previous = "O"
    for position, tag in enumerate(tags):
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            return position, (f"tag {tag!r} at word {position + 1} continues an entity, but "
                              f"it follows {previous!r}")
        previous = tag
    return None


def iob1_to_iob2(tags: list[str]) -> list[str]:
    """IOB1 (an entity begins with ``I-`` unless it follows one of its type) → IOB2 (every
    entity begins with ``B-``). A ``B-`` stays a ``B-``, also where IOB1 would not need it."""
    converted, previous = [], "O"
    for tag in tags:
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            tag = "B-" + tag[2:]
        converted.append(tag)
        previous = tag
    return converted


def repair_iob2(tags: list[str]) -> list[str]:
    """A predicted sequence as valid IOB2: an ``I-TYPE`` that follows no entity of its
    type begins one (conlleval's reading, and the token-classification pipeline's)."""
    return iob1_to_iob2(tags)


def entities(tags: list[str], words: list[str]) -> list[dict[str, Any]]:
    """The entities of a valid IOB2 sequence: type, first and last word (0-based), text."""
    found: list[dict[str, Any]] = []
    for position, tag in enumerate(tags):
        if tag.startswith("B-"):
            found.append({"type": tag[2:], "start": position, "end": position})
        elif tag.startswith("I-") and found and found[-1]["end"] == position - 1 \
                and found[-1]["type"] == tag[2:]:
            found[-1]["end"] = position
    for entity in found:
        entity["text"] = " ".join(words[entity["start"]:entity["end"] + 1])
    return found
