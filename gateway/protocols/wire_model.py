"""What the doors' typed bodies share: a strict base model, tagged unions, and errors' paths.

    class TextBlock(WireModel): type: Literal["text"]; text: str
    Block = Annotated[Annotated[TextBlock, Tag("type=text")] | ..., by_type("text", ..., other=True)]
    content: TextOr[Block]                  # a string, or an array of blocks
    for path, error in located(exc):        # a ValidationError's errors, on the wire's own paths
        ...

A door parses its body once into its pydantic models, which are both the
schema and what the translation reads (``anthropic_messages/model.py``,
``openai_responses/model.py``): a body that validates can always be read.
The models are strict (JSON's own types: no ``"5"`` for 5, no ``true`` for 1)
and ignore fields they do not name.

A union is tagged by the wire's own ``type``: ``by_type`` reads it, and the
tags are written ``type=<kind>`` (``type=*`` for a catch-all member that the
translation refuses by name), or ``json=string`` / ``json=array`` for a
field that is a string or an array (``TextOr``). Pydantic names the member it
tried in an error's ``loc``; no field is named so, and ``located`` leaves
the tags out, so an error's path is the client's (``messages.0.content.1``;
a client's own key written like a tag, in Responses' ``metadata``, would be
left out too). Each door words the errors in its own style.

A failing check of the door's own (a refusal pydantic has no type for) is a
``refusal(code, message)``: its code is the error's, its message already the
door's words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Discriminator, Tag, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

T = TypeVar("T")
OTHER = "type=*"
STRING, ARRAY = "json=string", "json=array"
_TAG_PREFIXES = ("type=", "json=")
KEY = "[key]"         # pydantic's mark on an error in a dict's key rather than its value


class WireModel(BaseModel):
    """A part of a request body as the client sent it: JSON's types, unknown fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")


def _string_or_array(value: Any) -> str:
    return STRING if isinstance(value, str) else ARRAY


# A string, or an array of T (anything else is refused as "not an array").
TextOr = Annotated[Annotated[str, Tag(STRING)] | Annotated[list[T], Tag(ARRAY)],
                   Discriminator(_string_or_array)]


def type_tag(*known: str, other: bool = False, absent: str | None = None
             ) -> Callable[[Any], str | None]:
    """The tag of an object in a union by its ``type`` (see ``by_type``)."""
    kinds = frozenset(known)

    def tag(value: Any) -> str | None:
        if not isinstance(value, dict):
            return OTHER if other else None
        if "type" not in value:
            return f"type={absent}" if absent else OTHER if other else None
        kind = value["type"]
        if isinstance(kind, str) and kind in kinds:
            return f"type={kind}"
        return OTHER if other else f"type={kind}"

    return tag


def by_type(*known: str, other: bool = False, absent: str | None = None) -> Discriminator:
    """The discriminator of a union of objects by their ``type``.

    A known kind is tagged ``type=<kind>``; an object without a ``type`` is
    the ``absent`` kind when there is a default. Anything else goes to the
    catch-all member (``type=*``) when ``other``, for the translation to
    refuse by name; without one, pydantic refuses it (``union_tag_invalid``
    naming the known kinds, or ``union_tag_not_found`` when there is no type).
    """
    return Discriminator(type_tag(*known, other=other, absent=absent))


def refusal(code: str, message: str, param: str | None = None) -> PydanticCustomError:
    """A door's own check failing inside validation, in the door's words (``refused``)."""
    # The message is the template's last substitution, so braces in it stay as they are.
    return PydanticCustomError(code, "{message}", {"code": code, "param": param, "message": message})


def refused(error: ErrorDetails) -> tuple[str, str, str | None] | None:
    """(code, message, param or None) of a ``refusal``; None for pydantic's own errors."""
    ctx = error.get("ctx") or {}
    if "code" not in ctx:
        return None
    return ctx["code"], ctx["message"], ctx["param"]


def located(exc: ValidationError) -> Iterator[tuple[tuple[int | str, ...], ErrorDetails]]:
    """Each error of ``exc`` with its path on the wire: fields and indexes, no union tags."""
    for error in exc.errors(include_url=False):
        path = tuple(step for step in error["loc"]
                     if not (isinstance(step, str) and (step.startswith(_TAG_PREFIXES)
                                                        or step == KEY)))
        yield path, error


def tag_names(expected: str) -> list[str]:
    """The kinds a ``union_tag_invalid`` error expected, from its ``'type=a', 'type=b'``."""
    return [t.strip().strip("'").removeprefix("type=") for t in expected.split(",") if t.strip()]


def first_error(exc: ValidationError) -> tuple[tuple[int | str, ...], ErrorDetails]:
    """The error a door answers with: the first (pydantic reports them in the fields' order)."""
    return next(located(exc))
